"""Deliberately broken operators, for checking that level 0's correctness checks catch bugs.

Test code, not part of d5pipe: a run imports them like any user operator, with this directory on
``PYTHONPATH`` and the module allowed by the person running d5pipe (tests.conftest.TESTING_OPS_ENV)::

    operators:
      op: matmul_wrong_forward
      custom: {matmul_wrong_forward: "testing_ops:MATMUL_WRONG_FORWARD"}

* ``MATMUL_WRONG_FORWARD``: an off-by-one bug; the last term of every inner product is dropped.
* ``MATMUL_WRONG_BACKWARD``: correct forward, but the gradient of B forgets a transpose.
* ``FAULT_*``: a correct matmul except at size ``FAULT_SIZE``, where it raises, exits 137, segfaults,
  hangs, exhausts its memory limit or kills its whole shard job (failure-injection tests).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from d5pipe.levels.level0.operators import MATMUL


def _matmul_off_by_one(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a[..., :-1] @ b[..., :-1, :]


class _MatmulBadGrad(torch.autograd.Function):
    """``a @ b`` whose backward returns ``a @ g`` instead of ``a^T @ g`` for the gradient of ``b``."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return grad @ b.transpose(-1, -2), a @ grad


def _matmul_bad_grad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _MatmulBadGrad.apply(a, b)
    return out


def _square_matmul_inputs(n: int, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Square operands (the wrong gradient ``a @ g`` only has the right shape for square a)."""
    return [torch.randn(n, n, generator=gen, dtype=torch.float64) for _ in range(2)]


MATMUL_WRONG_FORWARD = dataclasses.replace(
    MATMUL, name="matmul_wrong_forward", forward=_matmul_off_by_one, make_inputs=_square_matmul_inputs,
    flops=lambda n, b: 2 * n**3, min_bytes=lambda n, b, s: s * 3 * n * n,
)
MATMUL_WRONG_BACKWARD = dataclasses.replace(
    MATMUL, name="matmul_wrong_backward", forward=_matmul_bad_grad, make_inputs=_square_matmul_inputs,
    flops=lambda n, b: 2 * n**3, min_bytes=lambda n, b, s: s * 3 * n * n,
)


# --- fault injection: operators that break their process at one size (tests/test_failures.py) ---

FAULT_SIZE = 32
"""The size at which the fault operators below misbehave; other sizes are a correct matmul."""


def _fault(kind: str) -> None:
    import os
    import resource
    import signal
    import time

    if kind == "raise":
        raise RuntimeError("injected failure")
    if kind == "exit137":
        os._exit(137)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "hang":
        time.sleep(10**6)
    if kind == "oom":  # a memory blow-up under a ulimit -v, as a job limit would impose it
        # The limit sits 256 MiB above what the worker has mapped now, and one request asks for
        # 1 GiB: it fails at once, without first touching (and zeroing) gigabytes of pages, which
        # on a loaded machine took longer than the suite's point timeout.
        with open("/proc/self/statm", encoding="ascii") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        old = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (256 << 20), old[1]))
        try:
            hog = bytearray(1 << 30)
            del hog
        finally:
            resource.setrlimit(resource.RLIMIT_AS, old)
    if kind == "kill_shard":  # the kernel's OOM killer taking the whole shard job down
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(10**6)


def _faulty(kind: str) -> Any:
    def make_inputs(n: int, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
        if n == FAULT_SIZE:
            _fault(kind)
        return _square_matmul_inputs(n, batch, gen)

    return dataclasses.replace(
        MATMUL, name=f"fault_{kind}", make_inputs=make_inputs,
        flops=lambda n, b: 2 * n**3, min_bytes=lambda n, b, s: s * 3 * n * n,
        description=f"matmul that injects '{kind}' at size {FAULT_SIZE}",
    )


FAULT_RAISE = _faulty("raise")
FAULT_EXIT137 = _faulty("exit137")
FAULT_SEGV = _faulty("segv")
FAULT_HANG = _faulty("hang")
FAULT_OOM = _faulty("oom")
FAULT_KILL_SHARD = _faulty("kill_shard")


def _sleepy_inputs(n: int, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
    import time

    time.sleep(n / 10.0)  # a point that takes size/10 seconds (node-failure tests need time)
    return _square_matmul_inputs(8, batch, gen)


SLOW_MATMUL = dataclasses.replace(
    MATMUL, name="slow_matmul", make_inputs=_sleepy_inputs,
    flops=lambda n, b: 2 * 8**3, min_bytes=lambda n, b, s: s * 3 * 8 * 8,
    description="an 8x8 matmul whose inputs take size/10 seconds to build",
)
