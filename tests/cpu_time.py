"""Where ``make test``'s CPU goes: with ``D5PIPE_TEST_CPU=FILE`` each test phase (setup, call,
teardown) appends one line to FILE -- CPU seconds of the pytest process and of the processes it
waited for (the CLI, its Snakemake, shards and ranks: RUSAGE_CHILDREN counts every descendant that
was waited for), wall seconds and the test's ID. Daemons (a SLURM cluster's slurmd and its jobs) are
not counted: for the SLURM tests, wall time is what matters. Off unless the variable is set."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

LOG = os.environ.get("D5PIPE_TEST_CPU")


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if LOG:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
        yield from _measured(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
        yield from _measured(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
        yield from _measured(item, "teardown")


def _measured(item: pytest.Item, phase: str) -> Iterator[None]:
    cpu, wall = _cpu(), time.monotonic()
    yield
    line = f"{_cpu() - cpu:.2f}\t{time.monotonic() - wall:.2f}\t{phase}\t{item.nodeid}\n"
    with open(str(LOG), "a", encoding="utf-8") as f:
        f.write(line)
