"""The report's section of each level, one module each, found by the stage (:data:`SECTIONS`).

A level without a module of its own here gets :func:`d5pipe.results.report.levels.common.generic`:
its configurations, side-by-side answers and checks, without level-specific figures.
"""

from __future__ import annotations

from collections.abc import Callable

from d5pipe.results.report.blocks import Section
from d5pipe.results.report.levels import distributed, network, operators, training
from d5pipe.results.report.loader import RunData

SECTIONS: dict[str, Callable[[RunData], Section]] = {
    module.LEVEL.name: module.section for module in (operators, network, training, distributed)
}
"""Stage -> its report section."""
