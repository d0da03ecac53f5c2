"""An operator spec in the side-effect package."""

from d5pipe.levels.level0.operators import MATMUL

SPEC = MATMUL
