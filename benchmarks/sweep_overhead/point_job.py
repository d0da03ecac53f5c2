"""The same level-0 point, run by d5pipe's own point function outside d5pipe's workflow.

``python point_job.py floor N WORK``: (a) the in-process floor: every point of the N-point grid
through ``d5pipe.levels.level0.point.run_point`` in this one process, no records; prints JSON with
the seconds of the loop alone (after the imports).
``python point_job.py job B S OUT``: one point, its small JSON record written to OUT (what a
naive one-job-per-point Snakefile runs; the Hydra app calls :func:`point_record` the same way).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from templates import OPERATORS, SAMPLES, TIMER, grid  # noqa: E402

from d5pipe.levels.contract import PointContext  # noqa: E402
from d5pipe.levels.level0.point import run_point  # noqa: E402


def context(batch: int, size: int, work: Path, cache: dict[str, Any]) -> PointContext:
    ops = {**OPERATORS, "batch": batch, "size": size}
    return PointContext(
        experiment="ovh", stage="level0", point_id=f"b{batch}-s{size}",
        params={"operators.batch": batch, "operators.size": size},
        config={"operators": ops, "timer": dict(TIMER), "name": "ovh", "seed": 7},
        seed=1000 * batch + size, run_dir=work, work_dir=work, data_dir=work, executor={}, cache=cache,
    )


def n_samples(outcome: Any) -> int:
    return int(next(m.value for m in outcome.metrics if m.name == "n_samples"))


def point_record(batch: int, size: int, work: Path, cache: dict[str, Any]) -> dict[str, Any]:
    started = time.time()
    out = run_point(context(batch, size, work, cache))
    return {"params": {"operators.batch": batch, "operators.size": size}, "status": "ok",
            "metrics": {m.name: m.value for m in out.metrics if m.name in ("time", "n_samples")},
            "samples": out.samples["time"], "duration_s": time.time() - started}


def floor(n: int, work: Path) -> dict[str, Any]:
    nb, ns = grid(n)
    cache: dict[str, Any] = {}
    ten = 0
    start = time.perf_counter()
    for b in range(1, nb + 1):
        for s in range(1, ns + 1):
            ten += n_samples(run_point(context(b, s, work, cache))) == SAMPLES
    return {"seconds": time.perf_counter() - start, "points": n, "ten_samples": ten}


def main(argv: list[str]) -> int:
    if argv[0] == "floor":
        work = Path(argv[2])
        work.mkdir(parents=True, exist_ok=True)
        print(json.dumps(floor(int(argv[1]), work)))
        return 0
    if argv[0] == "job":
        out = Path(argv[3])
        rec = point_record(int(argv[1]), int(argv[2]), out.parent, {})
        out.write_text(json.dumps(rec))
        return 0
    raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
