"""Schema of the ``operators`` section (level 0). Torch-free: ``d5pipe plan`` reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from d5pipe.core.fields import at_least, choice, later
from d5pipe.levels.declare import Builtin, declared
from d5pipe.levels.level0.frameworks import DEFAULT, NAMES

BUILTIN_OPERATORS: tuple[str, ...] = DEFAULT.builtins
"""Names of the built-in operators (d5pipe.levels.level0.operators defines them): PyTorch's, the
default framework's, which has every one."""
BUILTIN_TARGET = "d5pipe.levels.level0.operators.builtin_spec"
"""The registered target of the built-in operators (``name`` its argument; d5pipe.levels.targets)."""
OPERATORS: dict[str, Builtin] = declared(*(Builtin(n, BUILTIN_TARGET, fixed={"name": n}) for n in BUILTIN_OPERATORS))
DTYPES: tuple[str, ...] = DEFAULT.dtypes
IMPLS: tuple[str, ...] = DEFAULT.impls
LAYOUTS: tuple[str, ...] = DEFAULT.layouts


@dataclass
class OperatorsConf:
    op: str = "matmul"
    """Built-in (:data:`BUILTIN_OPERATORS`) or a key of ``custom``."""
    framework: str = later(DEFAULT.name, choices=NAMES)
    """What runs the operator (d5pipe.levels.level0.frameworks; docs/plugins.md has the table):
    ``torch`` (level 0 as it always ran), ``jax``, ``tensorflow``, ``onnxruntime``. The same seeded
    inputs, float64 reference, checks and timer on each; compared side by side against ``torch``."""
    size: int = at_least(128, 1)
    """Operator-specific problem size (e.g. n for an n x n x n matmul; see d5pipe.levels.level0.operators)."""
    batch: int = at_least(1, 1)
    """Batch dimension of the operator's inputs (operators without one ignore it)."""
    dtype: str = choice("float32", DTYPES)
    """Unsupported on the device -> point skipped."""
    impl: str = choice("eager", IMPLS)
    """eager, compile (torch.compile; compile time kept out of the timing, reported as compile_s),
    channels_last (eager with the channels_last layout; conv2d only)."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:N``."""
    layout: str = choice("contiguous", LAYOUTS)
    """contiguous, channels_last (conv2d), transposed (matmul/bmm: B stored column-major)."""
    check_correctness: bool = True
    """Check the forward result against a float64 reference (``correctness``)."""
    check_backward: bool = True
    """Check the gradient against the float64 reference too (``gradient_check``)."""
    peak: bool = True
    """Report each point against the machine's ceilings (d5pipe.measure.ceilings, measured once per
    machine and thread count): % of the FLOP ceiling of its dtype, % of the bandwidth of the memory
    level its working set fits in, and % of its roofline bound."""
    time_backward: bool = True
    """Also time the backward pass alone (``time_bwd``) and forward+backward (``time_fwd_bwd``)."""
    tol_l2: Optional[float] = at_least(None, 0.0)  # noqa: UP045
    """Relative L2 error accepted by ``correctness``; null: the dtype's default (d5pipe.levels.verify)."""
    tol_max_rel: Optional[float] = at_least(None, 0.0)  # noqa: UP045
    """Largest relative element error accepted by ``correctness``; null: the dtype's default."""
    allowed_prefixes: list[str] = field(default_factory=lambda: ["d5pipe."])
    """Deprecated, admits nothing: the allow-list is the invoking user's (``--allow``, ``D5PIPE_ALLOW``,
    ``~/.config/d5pipe/allow.yaml``); an entry outside it is an error."""
    custom: dict[str, Any] = field(default_factory=dict)
    """User operators: name -> target (``{_target_: mypkg.ops.make_op}``, or ``"mypkg.ops:MYOP"``
    naming a d5pipe.levels.level0.spec.OperatorSpec), imported only under the allow-list."""
    extra: dict[str, Any] = field(default_factory=dict)
