"""The one verification module: how far code under test is from its reference, the tolerance
per check and dtype, and the three outcomes every check says (operators, network outputs,
optimizers, micro-batches, framework agreement).

A check measures a relative error ``err`` of the code under test against a reference and says:

* ``fail`` -- ``err`` is above the tolerance ``tol`` (or not finite, or shapes differ);
* ``pass`` -- ``err <= tol`` and ``tol`` is below ``detect`` (the relative error the check must be
  able to see, 1% by default): a systematic error of ``detect`` would have failed;
* ``undetectable`` -- ``err <= tol`` but ``tol >= detect``: the dtype's rounding alone needs a
  tolerance so wide that an error of ``detect`` would pass unseen, so "pass" would claim too much.

Verdict rows with ``undetectable`` are neither pass nor fail for the point's verdict
(d5pipe.results.verdicts counts ``pass``/``fail`` only). The operator and framework-agreement
checks declare no detection limit (``NO_DETECT``): they say ``pass`` or ``fail`` (a detection
limit of 1% would turn every bfloat16 operator's ``pass`` into ``undetectable``).

Errors of one tensor against its float64 reference (:func:`compare`; ``out`` upcast to float64):
``err_l2`` = ||out - ref|| / ||ref|| (relative L2), ``err_max_abs`` = max |out - ref|,
``err_max_rel`` = max |out - ref| / max |ref| (relative to the output's scale; an element-wise
relative error is meaningless where ``ref`` is near zero). Within tolerance when both
``err_l2 <= l2`` and ``err_max_rel <= max_rel``.

Two trajectories (an optimizer against its reference, a framework's weight update against the
float64 reference's) are compared by :func:`relative_divergence`, ``||p - p_ref|| / ||p_ref - p_0||``.

Tolerances, ``(l2, max_rel)`` per check kind and dtype of the code under test, are :data:`TOLERANCES`:

* ``operator`` (level 0 ``correctness``): about 10x / 40x the unit roundoff u of the dtype for low
  precision (output rounding alone gives ~u/sqrt(3) relative L2 error; accumulation in float32
  inside the kernels keeps the rest small), fixed small values for float32/float64. Gradients
  (``grad_check``) use ``GRAD_TOLERANCE_FACTOR`` (2) times these, checked on every input's gradient
  for one seeded upstream gradient; ``operators.tol_l2`` / ``tol_max_rel`` replace them for a point.
* ``network`` (level 1 ``output_check``): the same network in float64, eager, with the same
  (rounded) weights, on the same (rounded) batch. The largest errors measured on the built-in mlp,
  cnn and transformer (eager, compile and channels_last where they apply) on digits and wine,
  batch 64, on this repository's CPU test machine, were (1.3e-7, 1.8e-7) in float32, (3.6e-4,
  6.6e-4) in float16 and (2.9e-3, 4.8e-3) in bfloat16: the tolerances are about 10x (low precision)
  to 80x (float32) above them. So a 1% systematic error fails in float32 and float16, and a
  bfloat16 point, whose tolerance is 3%, says ``undetectable``. On CUDA, cuDNN convolutions use TF32
  by default (``torch.backends.cudnn.allow_tf32``), which keep 10 mantissa bits (unit roundoff
  4.9e-4, as float16): far above the float32 tolerance, so ``output_check`` says what TF32 does to
  a float32 cnn. ``level1.output_tol_l2`` / ``output_tol_max_rel`` replace them for a point.
* ``framework`` (level 2 ``framework_check``, d5pipe.levels.level2.frameworks.agreement): one
  number, the largest relative loss difference (both dtypes) and relative L2 update difference
  (float64) a framework may show against PyTorch in float64.
* The optimizer and micro-batch checks take theirs from the config (``train.reference_tolerance``,
  ``micro_batch_tolerance``), with ``detect_rel_error`` as the detection limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from d5pipe.core.outcome import Declared

if TYPE_CHECKING:  # torch only where a tensor is compared: the outcomes and the table import without it
    import torch

PASS, FAIL, UNDETECTABLE = "pass", "fail", "undetectable"
"""The three outcomes of a check (module docstring); a check with no tolerance says :func:`passed`."""
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "operator": {"float64": (1e-10, 1e-9), "float32": (1e-5, 1e-4), "float16": (5e-3, 2e-2), "bfloat16": (4e-2, 1.6e-1)},
    "network": {"float64": (1e-10, 1e-9), "float32": (1e-5, 1e-4), "float16": (5e-3, 1e-2), "bfloat16": (3e-2, 5e-2)},
    "framework": {"float64": (1e-6, 1e-6), "float32": (1e-4, 1e-4)},
}
"""``(l2, max_rel)`` per check kind and dtype name (module docstring)."""
GRAD_TOLERANCE_FACTOR = 2.0
"""Gradients of an operator are held to this many times its forward tolerance."""
DEFAULT_DETECT = 0.01
NO_DETECT = math.inf
"""The detection limit of a check that says only ``pass`` or ``fail``."""
MICRO_BATCH_METRICS = {
    "micro_batch_check": Declared("", "verdict", None, "the gradient accumulated over micro_batches parts of the first "
                                                       "batch against the whole batch's: pass, fail or undetectable"),
    "micro_batch_grad_rel_error": Declared("", "numerical", None, "that check's relative L2 error of the gradient"),
}
"""The micro-batch check's metrics (d5pipe.levels.micro_batches), declared once for levels 1 and 2."""


def tolerance(check: str, dtype: torch.dtype | str, l2: float | None = None,
              max_rel: float | None = None) -> tuple[float, float]:
    """The ``(l2, max_rel)`` tolerance of a ``check`` kind of :data:`TOLERANCES` for ``dtype`` (a
    torch dtype or its name); ``l2``/``max_rel`` (a point's override) replace the table's value."""
    d_l2, d_max = TOLERANCES[check][str(dtype).removeprefix("torch.")]
    return (d_l2 if l2 is None else float(l2)), (d_max if max_rel is None else float(max_rel))


def passed(ok: bool) -> str:
    """``pass`` or ``fail``: the outcome of a check that is right or wrong, with no tolerance."""
    return PASS if ok else FAIL


def verdict(err: float, tol: float, detect: float = DEFAULT_DETECT, ok: bool = True) -> str:
    """``pass``, ``fail`` or ``undetectable`` (module docstring); ``ok=False`` forces ``fail``."""
    if not ok or not math.isfinite(err) or err > tol:
        return FAIL
    return PASS if tol < detect else UNDETECTABLE


def _ratio(num: float, den: float) -> float:
    """``num / den`` of two norms; when ``den`` is 0: 0 if ``num`` is too, else inf."""
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


@dataclass(frozen=True)
class ErrorReport:
    """Errors of one tensor against its reference (:func:`compare`), and whether they are within tolerance."""

    err_l2: float
    err_max_abs: float
    err_max_rel: float
    tol_l2: float
    tol_max_rel: float
    passed: bool
    note: str = ""

    def verdict(self, detect: float = NO_DETECT) -> str:
        """The check's outcome (:func:`verdict` on the relative L2 error)."""
        return verdict(self.err_l2, self.tol_l2, detect, ok=self.passed)


def compare(out: torch.Tensor, ref: torch.Tensor, tol_l2: float, tol_max_rel: float) -> ErrorReport:
    """Errors of ``out`` against the float64 ``ref`` and whether they are within tolerance."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return ErrorReport(math.nan, math.nan, math.nan, tol_l2, tol_max_rel, False,
                           f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    out64 = out.detach().to(device="cpu", dtype=torch.float64)
    ref64 = ref.detach().to(device="cpu", dtype=torch.float64)
    if not bool(torch.isfinite(out64).all()):
        return ErrorReport(math.inf, math.inf, math.inf, tol_l2, tol_max_rel, False, "non-finite output")
    diff = out64 - ref64
    ref_max = float(ref64.abs().max()) if ref64.numel() else 0.0
    err_l2 = _ratio(float(torch.linalg.vector_norm(diff)), float(torch.linalg.vector_norm(ref64)))
    err_max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    err_max_rel = _ratio(err_max_abs, ref_max)
    return ErrorReport(err_l2, err_max_abs, err_max_rel, tol_l2, tol_max_rel,
                       err_l2 <= tol_l2 and err_max_rel <= tol_max_rel)


def worst(reports: list[ErrorReport]) -> ErrorReport:
    """One report for several tensors: the largest errors, failing if any fails."""
    if not reports:
        raise ValueError("no reports")
    notes = "; ".join(r.note for r in reports if r.note)
    return ErrorReport(
        max(r.err_l2 for r in reports),
        max(r.err_max_abs for r in reports),
        max(r.err_max_rel for r in reports),
        reports[0].tol_l2,
        reports[0].tol_max_rel,
        all(r.passed for r in reports),
        notes,
    )


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter, flattened into one float64 CPU tensor."""
    import torch

    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])


def relative_divergence(params: Any, reference: Any, start: Any) -> float:
    """``||params - reference|| / ||reference - start||`` (float64 vectors: CPU tensors or arrays):
    how far two trajectories from ``start`` drifted apart, relative to how far the reference moved
    (a 1% error in every update gives 0.01); ``inf`` when not finite or when only ``params`` moved."""
    p, r, s = (np.asarray(v, dtype=np.float64) for v in (params, reference, start))
    err = _ratio(float(np.linalg.norm(p - r)), float(np.linalg.norm(r - s)))
    return err if math.isfinite(err) else math.inf


def max_relative_difference(got: Sequence[float], ref: Sequence[float]) -> float:
    """The largest element-wise ``|got - ref| / |ref|`` (``|ref|`` floored at 1e-12) of two
    sequences of one length, e.g. two runs' losses; inf when the lengths differ, are 0 or not finite."""
    a, b = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if len(a) != len(b) or not len(a):
        return math.inf
    err = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))
    return err if math.isfinite(err) else math.inf
