"""After all shards: tidy results (with acceptance verdicts) and the completed manifest."""

from __future__ import annotations

from pathlib import Path

from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.manifest import finalize_environment, merge_dataset_meta


def finalize_results(run_dir: Path, out: Path) -> Path:
    import pandas as pd

    from d5pipe.results.aggregate import aggregate

    merge_dataset_meta(run_dir)
    path = aggregate(Path(run_dir), RunDir(run_dir).planned_ids, Path(out))
    add_acceptance(Path(run_dir), path)
    hashes = pd.read_parquet(path, columns=["env_hash"])["env_hash"].dropna()
    ranked = [str(h) for h in hashes.value_counts().index if str(h)]
    finalize_environment(Path(run_dir), ranked)
    return path


def add_acceptance(run_dir: Path, results: Path) -> None:
    """Append the recipe's acceptance verdicts (``acceptance:<metric>`` rows) to the results."""
    import io

    import pandas as pd

    from d5pipe.results.acceptance import evaluate_acceptance
    from d5pipe.rundir.atomic import write_bytes

    config = RunDir(run_dir).config
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
