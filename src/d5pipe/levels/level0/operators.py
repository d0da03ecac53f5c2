"""The built-in level-0 operators.

Shapes (``n`` = ``operators.size``, ``b`` = ``operators.batch``):

============  ==========================================  =====================================
op            inputs                                      FLOPs per forward call
============  ==========================================  =====================================
matmul        A (b*n, n), B (n, n)                        2 * b * n^3
bmm           A (b, n, n), B (b, n, n)                    2 * b * n^3
conv2d        x (b, 16, n, n), w (16, 16, 3, 3), pad 1    2 * b * 16 * 16 * 9 * n^2
sdpa          q, k, v (b, 8 heads, n tokens, 64)          4 * b * 8 * n^2 * 64 (QK^T and PV)
layer_norm    x (b, n, n), weight (n), bias (n)           7 per element of x
softmax       x (b, n, n), over the last dim              5 per element
gelu          x (b, n, n), exact (erf) form               5 per element
sum           x (b, n, n), over the last dim              1 per element
============  ==========================================  =====================================

FLOP conventions: a multiply-add is 2 FLOPs; ``exp``, ``erf`` and compares count 1; per-row work
(e.g. one reciprocal square root per row) is ignored. For matmul/bmm/conv2d/sdpa these agree with
``torch.utils.flop_counter.FlopCounterMode`` (tested); the pointwise and reduction counts are this
table's convention (FlopCounterMode does not count those operators).

Minimum bytes moved: every input read once and the output written once, in the point's dtype.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.level0.spec import Inputs, OperatorSpec, keep_layout

CONV_CHANNELS = 16
CONV_KERNEL = 3
SDPA_HEADS = 8
SDPA_HEAD_DIM = 64


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _transpose_second(inputs: Inputs) -> Inputs:
    """Same values, but the second operand stored transposed (a column-major view)."""
    a, b = inputs
    return [a, b.transpose(-1, -2).contiguous().transpose(-1, -2)]


def _channels_last(inputs: Inputs) -> Inputs:
    return [t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in inputs]


# --- matmul / bmm -------------------------------------------------------------------------------


def _matmul_inputs(n: int, b: int, gen: torch.Generator) -> Inputs:
    return [_randn(gen, b * n, n), _randn(gen, n, n)]


def _bmm_inputs(n: int, b: int, gen: torch.Generator) -> Inputs:
    return [_randn(gen, b, n, n), _randn(gen, b, n, n)]


def _matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(dim=-2) if a.numel() * b.shape[-1] <= 2**22 else a @ b


MATMUL = OperatorSpec(
    name="matmul",
    make_inputs=_matmul_inputs,
    forward=torch.matmul,
    reference=_matmul_reference,
    flops=lambda n, b: 2 * b * n**3,
    min_bytes=lambda n, b, s: s * (b * n * n + n * n + b * n * n),
    layouts={"contiguous": keep_layout, "transposed": _transpose_second},
    description="GEMM (b*n x n) @ (n x n)",
)

BMM = OperatorSpec(
    name="bmm",
    make_inputs=_bmm_inputs,
    forward=torch.bmm,
    reference=_matmul_reference,
    flops=lambda n, b: 2 * b * n**3,
    min_bytes=lambda n, b, s: s * 3 * b * n * n,
    layouts={"contiguous": keep_layout, "transposed": _transpose_second},
    description="batched GEMM b x (n x n) @ (n x n)",
)

# --- conv2d ---------------------------------------------------------------------------------------


def _conv_inputs(n: int, b: int, gen: torch.Generator) -> Inputs:
    c, k = CONV_CHANNELS, CONV_KERNEL
    return [_randn(gen, b, c, n, n), _randn(gen, c, c, k, k) / math.sqrt(c * k * k)]


def _conv_forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, padding=CONV_KERNEL // 2)


def _conv_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Direct convolution as a sum of shifted, channel-mixed copies (no conv kernel involved)."""
    k = w.shape[-1]
    pad = k // 2
    xp = F.pad(x, (pad, pad, pad, pad))
    h, wd = x.shape[-2], x.shape[-1]
    out = x.new_zeros(x.shape[0], w.shape[0], h, wd)
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i : i + h, j : j + wd]
            out = out + torch.einsum("bchw,oc->bohw", patch, w[:, :, i, j])
    return out


CONV2D = OperatorSpec(
    name="conv2d",
    make_inputs=_conv_inputs,
    forward=_conv_forward,
    reference=_conv_reference,
    flops=lambda n, b: 2 * b * CONV_CHANNELS * CONV_CHANNELS * CONV_KERNEL**2 * n * n,
    min_bytes=lambda n, b, s: s
    * (2 * b * CONV_CHANNELS * n * n + CONV_CHANNELS**2 * CONV_KERNEL**2),
    layouts={"contiguous": keep_layout, "channels_last": _channels_last},
    description="3x3 convolution, 16 -> 16 channels, n x n image, padding 1",
)

# --- scaled dot-product attention ------------------------------------------------------------------


def _sdpa_inputs(n: int, b: int, gen: torch.Generator) -> Inputs:
    return [_randn(gen, b, SDPA_HEADS, n, SDPA_HEAD_DIM) for _ in range(3)]


def _sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _softmax_reference((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])) @ v


SDPA = OperatorSpec(
    name="sdpa",
    make_inputs=_sdpa_inputs,
    forward=F.scaled_dot_product_attention,
    reference=_sdpa_reference,
    flops=lambda n, b: 4 * b * SDPA_HEADS * n * n * SDPA_HEAD_DIM,
    min_bytes=lambda n, b, s: s * 4 * b * SDPA_HEADS * n * SDPA_HEAD_DIM,
    description="scaled_dot_product_attention, 8 heads of dim 64, n tokens, no mask",
)

# --- pointwise and reductions over x (b, n, n) -----------------------------------------------------


def _square_inputs(n: int, b: int, gen: torch.Generator) -> Inputs:
    return [_randn(gen, b, n, n)]


def _layer_norm_inputs(n: int, b: int, gen: torch.Generator) -> Inputs:
    return [_randn(gen, b, n, n), 1.0 + 0.1 * _randn(gen, n), 0.1 * _randn(gen, n)]


def _layer_norm_forward(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, bias, eps=1e-5)


def _layer_norm_reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + bias


def _softmax_forward(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _softmax_reference(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def _gelu_forward(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def _gelu_reference(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _sum_forward(x: torch.Tensor) -> torch.Tensor:
    return torch.sum(x, dim=-1)


def _sum_reference(x: torch.Tensor) -> torch.Tensor:
    return x @ torch.ones(x.shape[-1], 1, dtype=x.dtype).squeeze(-1)


LAYER_NORM = OperatorSpec(
    name="layer_norm",
    make_inputs=_layer_norm_inputs,
    forward=_layer_norm_forward,
    reference=_layer_norm_reference,
    flops=lambda n, b: 7 * b * n * n,
    min_bytes=lambda n, b, s: s * (2 * b * n * n + 2 * n),
    description="layer_norm over the last dim of (b, n, n) with weight and bias",
)

SOFTMAX = OperatorSpec(
    name="softmax",
    make_inputs=_square_inputs,
    forward=_softmax_forward,
    reference=_softmax_reference,
    flops=lambda n, b: 5 * b * n * n,
    min_bytes=lambda n, b, s: s * 2 * b * n * n,
    description="softmax over the last dim of (b, n, n)",
)

GELU = OperatorSpec(
    name="gelu",
    make_inputs=_square_inputs,
    forward=_gelu_forward,
    reference=_gelu_reference,
    flops=lambda n, b: 5 * b * n * n,
    min_bytes=lambda n, b, s: s * 2 * b * n * n,
    description="exact (erf) GELU, elementwise on (b, n, n)",
)

SUM = OperatorSpec(
    name="sum",
    make_inputs=_square_inputs,
    forward=_sum_forward,
    reference=_sum_reference,
    flops=lambda n, b: b * n * n,
    min_bytes=lambda n, b, s: s * (b * n * n + b * n),
    description="sum over the last dim of (b, n, n)",
)

BUILTIN_SPECS: dict[str, OperatorSpec] = {
    spec.name: spec
    for spec in (MATMUL, BMM, CONV2D, SDPA, LAYER_NORM, SOFTMAX, GELU, SUM)
}
"""Name -> spec of every built-in operator (names: d5pipe.levels.level0.schema.BUILTIN_OPERATORS)."""


def builtin_spec(name: str) -> OperatorSpec:
    """The registered target of the built-in operators (d5pipe.levels.targets)."""
    return BUILTIN_SPECS[name]


def complete(spec: OperatorSpec) -> OperatorSpec:
    """``spec`` with what it leaves out (None) taken from its ``compare_to`` built-in.

    A spec without ``compare_to`` must give everything; the error names the missing parts.
    """
    parts = ("make_inputs", "reference", "flops", "min_bytes")
    missing = [p for p in parts if getattr(spec, p) is None]
    if not missing:
        return spec
    base = BUILTIN_SPECS.get(spec.compare_to)
    if base is None:
        raise D5PipeError(f"operator {spec.name!r}: {', '.join(missing)} missing and compare_to "
                          f"{spec.compare_to!r} names no built-in ({', '.join(BUILTIN_SPECS)})")
    return dataclasses.replace(spec, **{p: getattr(base, p) for p in missing})
