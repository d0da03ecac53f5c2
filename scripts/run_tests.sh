#!/usr/bin/env bash
# The whole suite as `make test` runs it: two pytest processes side by side on a 2-core machine.
#   * the SLURM tests (-m slurm), which mostly wait on the scheduler's polling, serially, in one
#     process (the one-node and the three-node test clusters share /etc/slurm and may not overlap);
#   * everything else in the other.
# Their outputs are kept apart (the SLURM log is printed after the rest) and the exit code is
# non-zero when either fails. Extra arguments go to both (e.g. --durations=30).
set -uo pipefail
PYTEST=${PYTEST:-.venv/bin/pytest}
log=$(mktemp "${TMPDIR:-/tmp}/d5pipe-slurm-tests.XXXXXX")
trap 'rm -f "$log"' EXIT
"$PYTEST" -q -m slurm -p no:cacheprovider "$@" >"$log" 2>&1 &
slurm_pid=$!
trap 'kill -TERM "$slurm_pid" 2>/dev/null; rm -f "$log"' EXIT INT TERM
echo "== tests without SLURM (the SLURM tests run alongside; their log follows)"
"$PYTEST" -q -m "not slurm" -p no:cacheprovider "$@"
rc_rest=$?
wait "$slurm_pid"
rc_slurm=$?
echo "== SLURM tests"
cat "$log"
echo "== exit: tests without SLURM $rc_rest, SLURM tests $rc_slurm"
[ "$rc_rest" -eq 0 ] && [ "$rc_slurm" -eq 0 ]
