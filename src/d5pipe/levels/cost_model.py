"""The parts of the levels' cost models they share: the expected seconds of a timed call site and
of a point's set-up. Torch-free.

Each level's ``stage.py`` estimates one point's work from its config alone (d5pipe.plan.build packs
shards by it, ``shards.target_s`` seconds of work a job). The estimate is deliberately simple and
documented, not measured:

* every point: :data:`POINT_FIXED_S` of set-up and checks, plus per timed call site
  ``timer.warmup_s`` and the timed part: ``timer.budget_s``, or ``timer.max_samples x
  timer.min_block_s`` when that is less (blocks of calls shorter than ``min_block_s`` last about
  ``min_block_s``, so a point with few samples of a fast operator stops long before its budget);
* ``torch.compile`` adds :data:`COMPILE_S` per compiled call site;
* a training step of a small model on a CPU costs :data:`STEP_S`, an evaluation :data:`EVAL_S`;
* a profiled pass (``profile.enabled``) :data:`PROFILE_PASS_S` (shown by ``d5pipe plan``, not packed
  into shards: it is small beside the timed work).

Defaults come from the schemas (d5pipe.core.fields.setting), never re-spelled here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.fields import setting
from d5pipe.levels.schema import DatasetConf
from d5pipe.measure.timer_schema import TimerConf

POINT_FIXED_S = 0.05
COMPILE_S = 15.0
STEP_S = 0.005
EVAL_S = 0.05
PROFILE_PASS_S = 0.1
"""One profiled pass (``profile.enabled``): its warm call, ``profile.iterations`` calls under
torch.profiler and the trace written. Measured on this project's 2-core VM (the quickstart,
2026-12-07; each record's ``pass_s``): medians 5 ms (level 0), 7 and 22 ms (level 1), 50 ms (level
2), 94 ms (level 3); the first pass of a process up to 0.65 s."""
DEFAULT_TRAIN_SAMPLES = 1500
"""Training samples assumed when the dataset's size is not in its config (digits: 1347)."""
GENERATED = ("synthetic", "synthetic_images", "synthetic_tokens")


def timed_s(cfg: Mapping[str, Any], sites: int) -> float:
    """Expected seconds of ``sites`` timed call sites under the point's ``timer``."""
    timer = cfg.get("timer") or {}
    budget = float(setting(timer, TimerConf, "budget_s"))
    by_samples = float(setting(timer, TimerConf, "max_samples")) * float(setting(timer, TimerConf, "min_block_s"))
    per_site = float(setting(timer, TimerConf, "warmup_s")) + (min(budget, by_samples) if by_samples > 0 else budget)
    return sites * per_site


def train_samples(cfg: Mapping[str, Any]) -> float:
    """Training samples of the point's dataset (a generated one's size, else an assumption)."""
    ds = cfg.get("dataset") or {}
    if setting(ds, DatasetConf, "name") in GENERATED:
        return float(setting(ds, DatasetConf, "n_samples")) * (1 - float(setting(ds, DatasetConf, "test_fraction")))
    return float(DEFAULT_TRAIN_SAMPLES)
