#!/usr/bin/env bash
# The GPU checks in one run: the CUDA tests of every level, then the timer-overhead ratio on CUDA
# next to torch.utils.benchmark. d5pipe is used from src/ (not installed); the checks need only
# torch with CUDA, numpy, scipy, scikit-learn, pytest and pytest-timeout (checked in a venv holding
# just those; all are in the nvidia-h200 image) plus the pure-Python hydra-core, omegaconf and
# antlr4 runtime that plug-in instantiation imports (d5pipe.levels.instantiate): the image lacks them,
# so copy them from the venv into .devicepkgs/ (git-ignored) and carry that folder:
#   SP=$(.venv/bin/python -c "import site; print(site.getsitepackages()[0])")
#   mkdir -p .devicepkgs && cp -r $SP/hydra $SP/omegaconf $SP/antlr4 .devicepkgs/
#   usage: bash scripts/device_check.sh [python]      (default: python3)
set -euo pipefail
PY=${1:-python3}
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[ -d .devicepkgs ] && export PYTHONPATH="$PYTHONPATH:$PWD/.devicepkgs"
"$PY" -c 'import torch; assert torch.cuda.is_available(), "no CUDA"; print(torch.__version__, torch.cuda.get_device_name())'
"$PY" -m pytest -q -p no:cacheprovider tests/test_cuda_paths.py "tests/test_timer.py::test_cuda_path_uses_events"
"$PY" benchmarks/bench_timer_overhead.py --device cuda --rounds 5
