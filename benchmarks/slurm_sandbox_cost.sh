#!/usr/bin/env bash
# What a sandbox of N nodes costs (docs/slurm.md): `up` time and its phases, the slurmds' total RSS,
# the other daemons' RSS, sinfo latency, restart-controller and down. Needs root; starts and stops
# its own sandbox under STATE_DIR (removed first).   usage: benchmarks/slurm_sandbox_cost.sh N STATE_DIR
set -euo pipefail
N=$1; D=$2; S="$(dirname "$0")/../scripts/slurm_sandbox.py"
rm -rf "$D"
trap 'python3 "$S" down "$D" >/dev/null 2>&1 || true' EXIT
/usr/bin/time -f "up: %e s wall" python3 "$S" up "$D" --nodes "$N" >/dev/null
export SLURM_CONF=$D/etc/slurm.conf
sleep 2
pids() { python3 -c "import json,sys; p=json.load(open('$D/pids.json')); print(','.join(str(v) for k,v in p.items() if k.startswith('slurmd@') == ($1)))"; }
echo "slurmd RSS: $(ps -o rss= -p "$(pids True)" | awk '{s+=$1; n++} END {printf "%.0f MiB total, %d processes, %.1f MiB each", s/1024, n, s/1024/n}')"
echo "other daemons RSS: $(ps -o comm=,rss= -p "$(pids False)" | awk '{printf "%s %.0f MiB; ", $1, $2/1024}')"
TIMEFORMAT=%R
for _ in 1 2 3 4 5; do { time sinfo -h -o "%T %D" >/dev/null; } 2>&1; done | sort -n |
    awk '{a[NR]=$1} END {print "sinfo latency (5 runs): median " a[3] " s (min " a[1] ", max " a[5] ")"}'
sinfo -h -o "%T %D"
/usr/bin/time -f "restart-controller: %e s wall" python3 "$S" restart-controller "$D"
/usr/bin/time -f "down: %e s wall" python3 "$S" down "$D"
echo "left: $(ps -eo stat=,comm=,args= | grep -vE '^Z' | grep -E '^\S+ +(slurm|munged|mariadbd)' | grep -c "$D" || true) processes, $(ip netns list | grep -c '^d5n' || true) namespaces"
