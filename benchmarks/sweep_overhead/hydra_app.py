"""(c) A tiny Hydra app: ``--multirun`` over operators.batch x operators.size with the basic launcher.

Each job runs the point in this process (torch is imported once, with this module) and writes a
small JSON record into its Hydra output directory. bench_sweep_overhead.py generates the config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))

from point_job import point_record  # noqa: E402

CACHE: dict[str, Any] = {}


@hydra.main(version_base=None)
def main(cfg: DictConfig) -> None:
    out = Path(HydraConfig.get().runtime.output_dir)
    rec = point_record(int(cfg.operators.batch), int(cfg.operators.size), out, CACHE)
    (out / "record.json").write_text(json.dumps(rec))


if __name__ == "__main__":
    main()
