"""The sandbox container: its specification (image, runtime, limits, seccomp), the
Docker engine and client it runs on, executions inside it and their output, the disk
quota, and the sweep of containers a run left behind."""
