"""A run's workspace on the worker's disk: prepared from its source, written only
through its own file operations, and hashed into revisions (its rebuild on another
host replays the write tools: sandbox/rebuild.py). The walker (walker, hashing,
fileops, patches, linediff) imports only the standard library: it runs as
`python -S -m sandbox.workspace.walker`."""
