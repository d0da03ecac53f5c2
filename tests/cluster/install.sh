#!/usr/bin/env bash
# Install Debian's SLURM daemons, client tools and munge -- only when missing.
# With the multi-node test cluster (tests/cluster/multinode_cluster.py) also: slurmdbd and
# MariaDB (accounting), the PMIx library that Slurm's mpi_pmix plugin dlopens, iproute2
# (network namespaces, veths, a bridge) and util-linux (nsenter, unshare: one hostname per node).
# Usage: tests/cluster/install.sh   (needs root and the Debian package registry)
set -euo pipefail

PMIX_LIB=/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so

needed=()
command -v slurmctld >/dev/null 2>&1 || needed+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || needed+=(slurmd)
command -v sbatch >/dev/null 2>&1 || needed+=(slurm-client)
command -v munged >/dev/null 2>&1 || needed+=(munge)
command -v slurmdbd >/dev/null 2>&1 || needed+=(slurmdbd)
command -v mariadbd >/dev/null 2>&1 || needed+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || needed+=(mariadb-client)
[ -e "$PMIX_LIB" ] || needed+=(libpmix-dev)
command -v ip >/dev/null 2>&1 || needed+=(iproute2)
command -v unshare >/dev/null 2>&1 || needed+=(util-linux)

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
# test clusters start their own daemons (tests/cluster/slurm_cluster.py, multinode_cluster.py).
apt-get install -y -qq --no-install-recommends "${needed[@]}"
