"""Level 1 ``output_check``: a network implementation's outputs against its float64 eager reference.

The reference is the same network (``model.reference`` empty), or the model ``model.reference``
names (a user model declaring which built-in or custom model it re-implements), built from the
same seed. A user model takes the reference's weights through its ``load_reference(reference)``
method when it has one, else through ``load_state_dict(reference.state_dict())`` (same names and
shapes). Both then hold the *same* weights rounded to the point's dtype; the reference runs them
in float64, eager, contiguous, in eval mode, on the point's batch rounded to that dtype, so only
the implementation's arithmetic (dtype, ``torch.compile``, ``channels_last``, the user's code)
is measured. Tolerances and verdicts: d5pipe.levels.verify.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from d5pipe.core.errors import D5PipeError
from d5pipe.core.outcome import Metric
from d5pipe.levels.level1.metrics import metric
from d5pipe.levels.level1.schema import Level1Conf
from d5pipe.levels.verify import compare, tolerance


def align_to_reference(model: nn.Module, reference: nn.Module, key: str = "model.reference") -> None:
    """Give ``model`` the weights of ``reference`` (see the module docstring)."""
    loader = getattr(model, "load_reference", None)
    try:
        if callable(loader):
            loader(reference)
        else:
            model.load_state_dict(reference.state_dict())
    except (RuntimeError, KeyError, ValueError) as exc:
        raise D5PipeError(f"{key}: cannot give the model the reference's weights ({str(exc).splitlines()[0]}); "
                          "give the model a load_reference(reference) method or the reference's parameter "
                          "names and shapes") from exc


def reference_copy(reference: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``reference`` with its weights rounded to ``dtype``, held in float64 on the CPU, eval mode."""
    return copy.deepcopy(reference).to("cpu").to(dtype).to(torch.float64).eval()


@dataclass
class OutputCheck:
    """What the check needs, prepared before any timing (timing updates BatchNorm statistics)."""

    reference: nn.Module
    """The float64 eager reference (CPU)."""
    state: dict[str, torch.Tensor]
    """The model's state before timing, restored before the check."""
    dtype: torch.dtype
    name: str


def prepare(model: nn.Module, reference: nn.Module, dtype: torch.dtype, name: str) -> OutputCheck:
    """Snapshot for :func:`run_check`; ``model`` already has its dtype, ``reference`` its weights."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return OutputCheck(reference_copy(reference, dtype), state, dtype, name)


def run_check(check: OutputCheck, model: nn.Module, forward: Callable[..., torch.Tensor] | nn.Module,
              x: torch.Tensor, conf: Level1Conf) -> tuple[list[Metric], dict[str, Any]]:
    """Compare ``forward(x)`` (eval mode) with the reference on the same batch."""
    model.load_state_dict(check.state)
    model.eval()
    with torch.inference_mode():
        out = forward(x)
        x_ref = x.detach().to("cpu")  # token ids stay integers; values go to float64
        ref = check.reference((x_ref.to(torch.float64) if x_ref.is_floating_point() else x_ref).contiguous())
    metrics, extra = judge(out, ref, check.dtype, conf, check.name)
    extra.update(detect_rel_error=conf.detect_rel_error,
                 note="outputs vs the float64 eager reference with the same rounded weights, same batch; "
                      "pass: both errors within tolerance and the tolerance below detect_rel_error; "
                      "undetectable: within tolerance, but the tolerance cannot see detect_rel_error")
    return metrics, extra


def judge(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, conf: Level1Conf,
          reference: str) -> tuple[list[Metric], dict[str, Any]]:
    """``output_check`` (d5pipe.levels.verify.verdict), ``output_err_l2`` and ``output_err_max_rel``
    of the outputs ``out`` against the float64 ``ref``, and what to record (``reference`` names it)."""
    tol_l2, tol_max = tolerance("network", dtype, conf.output_tol_l2, conf.output_tol_max_rel)
    report = compare(out, ref, tol_l2, tol_max)
    result = report.verdict(conf.detect_rel_error)
    metrics = [
        metric("output_check", result),
        metric("output_err_l2", report.err_l2),
        metric("output_err_max_rel", report.err_max_rel),
    ]
    extra: dict[str, Any] = {"reference": reference, "tol_l2": tol_l2, "tol_max_rel": tol_max}
    if report.note:
        extra["problem"] = report.note
    return metrics, extra
