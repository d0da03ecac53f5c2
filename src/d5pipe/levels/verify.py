"""Verdicts of the checks of user code against references (levels 1 and 2), and their tolerances.

A check measures a relative error ``err`` of the code under test against a reference and says:

* ``fail`` -- ``err`` is above the tolerance ``tol`` (or not finite, or shapes differ);
* ``pass`` -- ``err <= tol`` and ``tol`` is below ``detect`` (the relative error the check must be
  able to see, 1% by default): a systematic error of ``detect`` would have failed;
* ``undetectable`` -- ``err <= tol`` but ``tol >= detect``: the dtype's rounding alone needs a
  tolerance so wide that an error of ``detect`` would pass unseen, so "pass" would claim too much.

Verdict rows with ``undetectable`` are neither pass nor fail for the point's verdict
(d5pipe.results.verdicts counts ``pass``/``fail`` only).

Network outputs (level 1 ``output_check``) are compared with the same network in float64, eager,
with the same (rounded) weights, on the same (rounded) batch. Default tolerances, relative L2
error / max error relative to the largest output, per dtype of the network under test:

=========  ========  =========  ================================
dtype      l2        max_rel    largest measured (l2, max_rel)
=========  ========  =========  ================================
float64    1e-10     1e-9
float32    1e-5      1e-4       1.3e-7, 1.8e-7
float16    5e-3      1e-2       3.6e-4, 6.6e-4
bfloat16   3e-2      5e-2       2.9e-3, 4.8e-3
=========  ========  =========  ================================

The measured column is the largest error of the built-in mlp, cnn and transformer (eager,
compile and channels_last where they apply) on digits and wine, batch 64, on this repository's
CPU test machine; the tolerances are about 10x (low precision) to 80x (float32) above it. So a
1% systematic error fails in float32 and float16, and a bfloat16 point, whose tolerance is 3%,
says ``undetectable``. On CUDA, cuDNN convolutions use TF32 by default
(``torch.backends.cudnn.allow_tf32``), which keep 10 mantissa bits (unit roundoff 4.9e-4, as
float16): far above the float32 tolerance, so ``output_check`` says what TF32 does to a float32 cnn.
"""

from __future__ import annotations

import math

import torch

NETWORK_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-9),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (5e-3, 1e-2),
    torch.bfloat16: (3e-2, 5e-2),
}
DEFAULT_DETECT = 0.01


def verdict(err: float, tol: float, detect: float = DEFAULT_DETECT, ok: bool = True) -> str:
    """``pass``, ``fail`` or ``undetectable`` (module docstring); ``ok=False`` forces ``fail``."""
    if not ok or not math.isfinite(err) or err > tol:
        return "fail"
    return "pass" if tol < detect else "undetectable"


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter, flattened into one float64 CPU tensor."""
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])


def relative_divergence(params: torch.Tensor, reference: torch.Tensor, start: torch.Tensor) -> float:
    """``||params - reference|| / ||reference - start||``: how far the two trajectories drifted
    apart, relative to how far the reference moved (a 1% error in every update gives 0.01)."""
    moved = float(torch.linalg.vector_norm(reference - start))
    diff = float(torch.linalg.vector_norm(params - reference))
    if moved == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / moved
