#!/usr/bin/env bash
# Install Debian's SLURM daemons, client tools and munge -- only when missing.
# Usage: tests/cluster/install.sh   (needs root and the Debian package registry)
set -euo pipefail

needed=()
command -v slurmctld >/dev/null 2>&1 || needed+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || needed+=(slurmd)
command -v sbatch >/dev/null 2>&1 || needed+=(slurm-client)
command -v munged >/dev/null 2>&1 || needed+=(munge)

if [ "${#needed[@]}" -eq 0 ]; then
    echo "slurm test cluster: all packages present"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "slurm test cluster: missing ${needed[*]}; run this script as root" >&2
    exit 1
fi

echo "slurm test cluster: installing ${needed[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d in containers keeps the packaged services from starting; the
# test cluster starts its own daemons on loopback (tests/cluster/slurm_cluster.py).
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge
