#!/bin/sh
# The wrapper every check runs under (sandbox/container/exec_watch.py): scratch is
# emptied before and after, so no check sees what an earlier one left there; the check
# is killed at its timeout; whatever it left running is killed after it (PID 1, the
# reaper, is spared by the kernel). The paths are sandbox/container/spec.py's SCRATCH
# and WORKDIR and the engine's shared memory; tests/test_sandbox_programs.py holds
# them to those values.
#
# $1: the timeout in seconds; $2: where the check runs, "workspace" (read-only) or
# "copy" (a throwaway copy of it in scratch, for a check that must write into its
# tree); the rest is the check's argv (never a shell string).
#
# Its last bytes on standard error are the check's exit status, framed by record
# separators (\036harness-exit:N\036, exec_watch.py EXIT_TRAILER): the worker reads it
# from the output stream it already has instead of asking the engine afterwards. It is
# written after everything the check started is killed, so nothing of the check's can
# follow it; a stream that ends without it (the wrapper itself killed: the container
# stopped or removed under it) has the worker ask the engine.
SCRATCH=/tmp
SHM=/dev/shm
WORKDIR=/workspace

# Emptied by find only when something is there: the common check leaves nothing, and
# four processes more per check were most of what the wrapper cost.
reset_scratch() {
    if holds "$SCRATCH" || holds "$SHM"; then
        find "$SCRATCH" "$SHM" -mindepth 1 -type d -exec chmod u+rwx {} + 2>/dev/null
        find "$SCRATCH" "$SHM" -mindepth 1 -delete 2>/dev/null
    fi
}

# Whether directory $1 has any entry, dot files included (the shell's own globbing,
# no process; a pattern that matches nothing stays as written and does not exist).
holds() {
    for entry in "$1"/* "$1"/.[!.]* "$1"/..?*; do
        if [ -e "$entry" ] || [ -L "$entry" ]; then
            return 0
        fi
    done
    return 1
}

timeout_seconds=$1
where=$2
shift 2
finish() {
    printf '\036harness-exit:%d\036' "$1" >&2
    exit "$1"
}

reset_scratch
if [ "$where" = copy ]; then
    cp -R "$WORKDIR/." "$SCRATCH/tree" || finish 125
    cd "$SCRATCH/tree" || finish 125
fi
timeout -s KILL "$timeout_seconds" "$@"
rc=$?
kill -9 -1 2>/dev/null
reset_scratch
finish $rc
