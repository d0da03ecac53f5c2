#!/usr/bin/env bash
# The whole suite as `make test` runs it: four pytest processes side by side. The tests spend much
# of their time waiting (on SLURM's polling, on launched ranks, on timeouts they provoke), so one
# process leaves a 2-core machine half idle (three lanes still used about half of its CPU time).
#   1. the SLURM tests (-m slurm), serially: the one-node and the three-node test clusters share
#      /etc/slurm and may not overlap;
#   2. the long failure-injection, bring-your-own-code, strategy, training-framework, environment-rebuild,
#      history-store and disk-full modules (HEAVY below);
#   3. the long end-to-end CLI runs of reproduce, runtimes, comparisons, the model zoo,
#      generated datasets, the audited reads of a run, profiles, early stopping and the parameter
#      servers (HEAVY2 below);
#   4. everything else;
# then, alone once the lanes are done, the tests whose timed change needs a quiet machine (QUIET).
# Each has its own --basetemp; `make lint` runs beside them. Lane 4 prints as it goes, the others' logs follow it; the exit code
# is non-zero when any lane fails. Extra arguments go to all three (e.g. --durations=30).
set -uo pipefail
PYTEST=${PYTEST:-.venv/bin/pytest}
HEAVY=(tests/test_failures.py tests/test_example_byo.py tests/test_strategies.py tests/test_verification.py tests/test_ab.py
       tests/test_train_frameworks.py tests/test_framework_threads.py tests/test_rebuild_env.py tests/test_history_store.py
       tests/test_disk_full.py)
HEAVY2=(tests/test_tutorials.py tests/test_reproduce_e2e.py tests/test_runtimes.py tests/test_comparisons.py
        tests/test_level2_sanity.py tests/test_zoo.py tests/test_lazy_datasets.py tests/test_reads_once.py
        tests/test_data_pipeline_e2e.py tests/test_profiles.py tests/test_early_stop.py tests/test_early_stop_level3.py
        tests/test_parameter_servers.py)
# Timed comparisons that need a quiet machine (two threads against one; a rank slowed on purpose
# against ranks that must not look slow; profiling on against off, equivalent; LoadGen runs whose
# validity rests on latencies and durations its calibration predicted): alone, after the lanes.
QUIET=(tests/test_history_quickstart.py tests/test_rank_split.py tests/test_profile_equivalence.py tests/test_loadgen.py)
work=$(mktemp -d "${TMPDIR:-/tmp}/d5pipe-tests.XXXXXX")
# compiled operators' binaries (tests/test_compiled.py and the SLURM lane's): one cache for the lanes,
# so the C++ example builds once per make test; fresh each time
export D5PIPE_TEST_COMPILED_CACHE="$work/compiled-cache"
pids=()
lint_pid=""
cleanup() { for p in "${pids[@]}" $lint_pid; do kill -TERM "$p" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT INT TERM
ignore=()
for f in "${HEAVY[@]}" "${HEAVY2[@]}" "${QUIET[@]}"; do ignore+=("--ignore=$f"); done

"$PYTEST" -q -m slurm -p no:cacheprovider --basetemp="$work/slurm" "$@" >"$work/slurm.log" 2>&1 &
pids+=($!)
# the linters run beside the tests (the SLURM lane, the longest, mostly waits): ${LINT:-make -s lint}
${LINT:-make -s lint} >"$work/lint.log" 2>&1 &
lint_pid=$!
"$PYTEST" -q -m "not slurm" -p no:cacheprovider --basetemp="$work/heavy" "$@" "${HEAVY[@]}" >"$work/heavy.log" 2>&1 &
pids+=($!)
"$PYTEST" -q -m "not slurm" -p no:cacheprovider --basetemp="$work/heavy2" "$@" "${HEAVY2[@]}" >"$work/heavy2.log" 2>&1 &
pids+=($!)
echo "== tests (the SLURM tests, ${HEAVY[*]} and ${HEAVY2[*]} run alongside; their logs follow)"
"$PYTEST" -q -m "not slurm" -p no:cacheprovider --basetemp="$work/rest" "$@" "${ignore[@]}"
rc_rest=$?
wait "${pids[0]}"; rc_slurm=$?
wait "${pids[1]}"; rc_heavy=$?
wait "${pids[2]}"; rc_heavy2=$?
wait "$lint_pid"; rc_lint=$?
echo "== ${QUIET[*]} (alone, on a quiet machine)"
"$PYTEST" -q -m "not slurm" -p no:cacheprovider --basetemp="$work/quiet" "$@" "${QUIET[@]}"
rc_quiet=$?
echo "== lint (ruff, mypy, snakemake --lint)"
cat "$work/lint.log"
echo "== ${HEAVY[*]}"
cat "$work/heavy.log"
echo "== ${HEAVY2[*]}"
cat "$work/heavy2.log"
echo "== SLURM tests"
cat "$work/slurm.log"
echo "== exit: rest $rc_rest, heavy modules $rc_heavy, end-to-end modules $rc_heavy2, SLURM tests $rc_slurm, lint $rc_lint, quiet $rc_quiet"
[ "$rc_rest" -eq 0 ] && [ "$rc_heavy" -eq 0 ] && [ "$rc_heavy2" -eq 0 ] && [ "$rc_slurm" -eq 0 ] && [ "$rc_lint" -eq 0 ] && [ "$rc_quiet" -eq 0 ]
