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
SCRATCH=/tmp
SHM=/dev/shm
WORKDIR=/workspace

reset_scratch() {
    find "$SCRATCH" "$SHM" -mindepth 1 -type d -exec chmod u+rwx {} + 2>/dev/null
    find "$SCRATCH" "$SHM" -mindepth 1 -delete 2>/dev/null
}

timeout_seconds=$1
where=$2
shift 2
reset_scratch
if [ "$where" = copy ]; then
    cp -R "$WORKDIR/." "$SCRATCH/tree" || exit 125
    cd "$SCRATCH/tree" || exit 125
fi
timeout -s KILL "$timeout_seconds" "$@"
rc=$?
kill -9 -1 2>/dev/null
reset_scratch
exit $rc
