# d5pipe: the two commands are `make run` and `make test`; everything else is a step they use.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.d5pipe-installed
TEST_STAMP := $(VENV)/.d5pipe-test-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test test-fast install install-test build-tools system-deps horovod bench lint docs clean

# Python environment: torch (CPU wheel, pinned) first, then d5pipe, its dependencies and the level-1
# runtimes, the model zoo and level 2's training frameworks (the `frameworks` extra: ONNX Runtime, OpenVINO,
# transformers, JAX with optax, TensorFlow with keras).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[frameworks]'
	touch $(STAMP)

install: $(STAMP)

# Test-only dependencies: MPI (PyPI Open MPI + mpi4py), Horovod (built against this torch),
# Debian's Slurm + munge (the tests start a local cluster) and Chromium (report screenshots).
# The Debian packages (Slurm, MariaDB, Chromium: mostly download and unpack) install in the
# background while pip and the Horovod build (mostly compiling) run; Horovod's compilers first.
$(TEST_STAMP): $(STAMP) scripts/install_horovod.sh tests/cluster/install.sh
	$(MAKE) -s build-tools
	@log=$$(mktemp); $(MAKE) -s system-deps >"$$log" 2>&1 & apt=$$!; \
	  $(PIP) install -q -e '.[mpi,test]' && bash scripts/install_horovod.sh $(VENV); rc=$$?; \
	  wait $$apt; arc=$$?; echo "== system packages (apt, in the background)"; cat "$$log"; rm -f "$$log"; \
	  [ $$rc -eq 0 ] && [ $$arc -eq 0 ]
	touch $(TEST_STAMP)

install-test: $(TEST_STAMP)

build-tools:
	@missing=""; for t in cmake g++ make; do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	  if [ -n "$$missing" ]; then $(SUDO) apt-get update -qq && \
	    $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$$missing >/dev/null; fi

system-deps:
	@if ! command -v chromium >/dev/null; then \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi
	bash tests/cluster/install.sh

horovod: $(STAMP)
	bash scripts/install_horovod.sh $(VENV)

run: install
	$(VENV)/bin/d5pipe run quickstart

# Four pytest processes side by side (scripts/run_tests.sh): the SLURM tests, two sets of long modules, the rest;
# the linters (make lint) run beside them, and any failure fails the target.
test: install-test
	PYTEST=$(VENV)/bin/pytest bash scripts/run_tests.sh

# The suite without the SLURM cluster, MPI ranks or the browser (minutes, not tens of minutes).
test-fast: install-test
	$(VENV)/bin/pytest -q -m "not slurm and not mpi and not browser"

bench: install-test
	$(PIP) install -q -e '.[bench]'
	@set -e; for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f; done

# ruff and mypy over the code; Snakemake's linter over the workflow of a planned tiny run.
lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks scripts workflow/scripts
	$(PY) -m mypy
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	  $(VENV)/bin/d5pipe run tiny --config-dir tests/configs --out "$$d/run" --dry-run >/dev/null && \
	  $(PY) -m snakemake --lint --snakefile Snakefile --directory "$$d/run"

clean:
	rm -rf runs .snakemake

# The reference pages generated from the code (docs/reference/: every config key, every command's help,
# the exit codes), then the MkDocs site (mkdocs.yml -> site/) with warnings as errors: a broken link fails.
# tests/test_reference_docs.py fails when the committed pages are stale and builds the site too.
docs:
	PYTHONPATH=src $(PY) -m d5pipe.cli.reference
	$(PY) -m mkdocs build --strict --quiet
