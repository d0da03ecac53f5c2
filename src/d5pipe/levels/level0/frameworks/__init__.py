"""The frameworks of ``operators.framework``, collected from their declarations. Torch-free.

Each framework is one module here with one :class:`~.contract.Framework` declaration, ``FRAMEWORK``
(``torch_ops``, ``jax_ops``, ``tf_ops``, ``ort_ops``); adding one is a module and a line in
:data:`FRAMEWORKS`. The schema's choices, the plan's checks (d5pipe.levels.level0.validate) and
the docs' table (:func:`docs_table`, docs/plugins.md) are derived from them.
"""

from __future__ import annotations

from d5pipe.levels.level0.frameworks import jax_ops, ort_ops, tf_ops, torch_ops
from d5pipe.levels.level0.frameworks.contract import Framework

FRAMEWORKS: dict[str, Framework] = {
    m.FRAMEWORK.name: m.FRAMEWORK for m in (torch_ops, jax_ops, tf_ops, ort_ops)
}
"""Name -> declaration; the first is the default (level 0 as it has always run)."""
NAMES: tuple[str, ...] = tuple(FRAMEWORKS)
DEFAULT: Framework = next(iter(FRAMEWORKS.values()))


def docs_table() -> str:
    """The Markdown table of the frameworks, as docs/plugins.md shows it (a test holds the two together)."""
    rows = ["| `operators.framework` | what runs | dtypes | gradient check | a call waits by | needs | notes |",
            "|---|---|---|---|---|---|---|"]
    for f in FRAMEWORKS.values():
        rows.append(f"| `{f.name}` | {f.title} | {', '.join(f.dtypes)} | {f.gradient or 'none (forward only)'} | "
                    f"{f.sync} | {', '.join(f.packages)} | {'; '.join(f.notes) or '-'} |")
    return "\n".join(rows)
