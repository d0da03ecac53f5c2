"""Analytic FLOP counts of the level-0 operators against torch.utils.flop_counter.FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from d5pipe.levels.level0.operators import BUILTIN_SPECS

NOT_COUNTED = {"layer_norm", "softmax", "gelu", "sum"}
"""Pointwise/reduction operators: FlopCounterMode counts nothing for them (our counts are a convention)."""


def counted_flops(fn, inputs: list[torch.Tensor]) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*inputs)
    return int(counter.get_total_flops())


@pytest.mark.parametrize("name", sorted(BUILTIN_SPECS))
@pytest.mark.parametrize(("size", "batch"), [(16, 1), (24, 3)])
def test_flops_agree_with_flop_counter(name: str, size: int, batch: int) -> None:
    spec = BUILTIN_SPECS[name]
    inputs = spec.make_inputs(size, batch, torch.Generator().manual_seed(0))
    counted = counted_flops(spec.forward, [t.float() for t in inputs])
    if counted == 0:
        # e.g. sdpa on CPU dispatches to a kernel FlopCounterMode does not know; its float64
        # reference is built from matmuls the counter does count
        counted = counted_flops(spec.reference, inputs)
    if name in NOT_COUNTED:
        assert counted == 0, f"FlopCounterMode now counts {name}: compare against it"
    else:
        assert counted == spec.flops(size, batch)


@pytest.mark.parametrize("name", sorted(BUILTIN_SPECS))
def test_min_bytes_cover_inputs_and_output(name: str) -> None:
    spec = BUILTIN_SPECS[name]
    inputs = spec.make_inputs(8, 2, torch.Generator().manual_seed(0))
    out = spec.forward(*inputs)
    elements = sum(t.numel() for t in inputs) + out.numel()
    assert spec.min_bytes(8, 2, 4) == 4 * elements


def test_builtin_specs_match_the_schema_names() -> None:
    from d5pipe.levels.level0.schema import BUILTIN_OPERATORS

    assert tuple(BUILTIN_SPECS) == BUILTIN_OPERATORS
