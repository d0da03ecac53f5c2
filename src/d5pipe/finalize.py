"""After all shards: tidy results (with acceptance verdicts) and the completed manifest."""

from __future__ import annotations

from pathlib import Path

from d5pipe.manifest import finalize_environment, merge_dataset_meta


def planned_ids(run_dir: Path) -> dict[str, list[str]]:
    """Point IDs of the current plan, per stage (old records of other configs are ignored)."""
    import json

    out: dict[str, list[str]] = {}
    plan_dir = Path(run_dir) / "plan"
    with open(plan_dir / "index.json", encoding="utf-8") as fh:
        index = json.load(fh)
    for stage, info in index["stages"].items():
        ids: list[str] = []
        for shard in info["shards"]:
            with open(plan_dir / stage / f"{shard}.json", encoding="utf-8") as fh:
                ids.extend(p["point_id"] for p in json.load(fh)["points"])
        out[stage] = ids
    return out


def finalize_results(run_dir: Path, out: Path) -> Path:
    from d5pipe.aggregate import aggregate

    import pandas as pd

    merge_dataset_meta(run_dir)
    path = aggregate(Path(run_dir), planned_ids(run_dir), Path(out))
    add_acceptance(Path(run_dir), path)
    hashes = pd.read_parquet(path, columns=["env_hash"])["env_hash"].dropna()
    ranked = [str(h) for h in hashes.value_counts().index if str(h)]
    finalize_environment(Path(run_dir), ranked)
    return path


def add_acceptance(run_dir: Path, results: Path) -> None:
    """Append the recipe's acceptance verdicts (``acceptance:<metric>`` rows) to the results."""
    import io

    import pandas as pd
    import yaml

    from d5pipe.atomic import write_bytes
    from d5pipe.recipes import evaluate_acceptance

    with open(Path(run_dir) / "config.yaml", encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    acceptance = (config.get("recipe") or {}).get("acceptance") or []
    if not acceptance:
        return
    df = pd.read_parquet(results)
    verdicts = evaluate_acceptance(df, acceptance)
    if verdicts.empty:
        return
    merged = pd.concat([df, verdicts.astype(df.dtypes.to_dict(), errors="ignore")], ignore_index=True)
    buf = io.BytesIO()
    merged.to_parquet(buf, index=False)
    write_bytes(results, buf.getvalue())
