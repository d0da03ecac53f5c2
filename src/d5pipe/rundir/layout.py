"""``RunDir``: every path of a run directory, and its files parsed once.

Layout (``RUN`` = the run directory)::

    RUN/config.yaml                    composed, resolved config
    RUN/overrides.yaml                 the experiment name and command-line overrides
    RUN/manifest.json                  provenance (d5pipe.rundir.manifest)
    RUN/plan/index.json                stages, shards, datasets (read by the Snakefile)
    RUN/plan/<stage>/<shard>.json      the points of one shard (ID, params, seed, dataset)
    RUN/plan/checks.json               the config verdicts depend on (recipe acceptance)
    RUN/data/<dataset_key>.npz|.json   prepared datasets and their metadata
    RUN/points/<stage>/<point_id>.json one record per point (d5pipe.rundir.record), written atomically
    RUN/shards/<stage>/<shard>.json    shard completion markers (Snakemake outputs)
    RUN/shards/<stage>/<shard>.attempts points the shard started (crash accounting)
    RUN/work/<stage>/<point_id>/       per-point scratch (step logs, rank outputs)
    RUN/profiles/<stage>/<point_id>.*  a profiled pass's trace (d5pipe.measure.profile) and, from
                                       ``d5pipe profile``, its record
    RUN/mlperf/<stage>/<point_id>.log  a training point's MLPerf log (d5pipe.measure.mllog); level 1's
    RUN/mlperf/<stage>/<point_id>/     LoadGen summary and detail logs
    RUN/env/<env_hash>.json            the environment record of each distinct job environment
    RUN/logs/<rule>/...                Snakemake job logs
    RUN/logs/slurm_events.jsonl        what the SLURM driver saw (d5pipe.rundir.slurm_events)
    RUN/results.parquet (+ summary_<stage>, warnings, curves, comparisons, profile), RUN/report.html, RUN/report.md,
    RUN/verdict.json                   the run's verdict (what d5pipe run/status exit with)
    RUN/CHECKSUMS.sha256               the seal that makes the directory a bundle

Nothing else in d5pipe spells these names. ``config``, ``index``, ``manifest`` and shard plans are
parsed on first use and kept until the file changes (a stat, never a second read: every write is
atomic, so a new file is a new inode); :meth:`RunDir.of` is the one instance per directory and
process, and what d5pipe writes through :meth:`RunDir.write_json` is kept as written, so each
process parses each file at most once (tests/test_reads_once.py counts it).
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, ClassVar

from d5pipe.core.errors import D5PipeError

RESULTS_FILE = "results.parquet"
MANIFEST_FILE = "manifest.json"
CHECKSUMS_FILE = "CHECKSUMS.sha256"
REPRODUCE_FILE = "reproduce.json"


class _Under:
    """A path of the run directory, read as an attribute of a :class:`RunDir`: its root joined with ``parts``."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, rd: RunDir, owner: type | None = None) -> Path:
        return rd.root.joinpath(*self.parts)


class RunDir:
    """One run directory (see the module docstring for its layout)."""

    _shared: ClassVar[dict[str, RunDir]] = {}

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._parsed: dict[Path, tuple[tuple[int, int, int], Any]] = {}

    @classmethod
    def of(cls, root: str | Path) -> RunDir:
        """The process-wide instance for ``root`` (parsed files are shared)."""
        key = os.path.realpath(root)
        if key not in cls._shared:
            cls._shared[key] = cls(root)
        return cls._shared[key]

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    # --- paths -----------------------------------------------------------------------------------
    config_path = _Under("config.yaml")
    overrides_path = _Under("overrides.yaml")
    manifest_path = _Under(MANIFEST_FILE)
    plan_dir = _Under("plan")
    index_path = _Under("plan", "index.json")
    checks_path = _Under("plan", "checks.json")
    """``plan/checks.json``: what verdicts depend on (aggregation re-runs when it changes)."""
    repetitions_path = _Under("plan", "repetitions.json")
    """``plan/repetitions.json``: configurations measured more often than ``repetitions``
    (the until-decided mode; d5pipe.plan.build.build_plan's ``more``)."""
    points_dir = _Under("points")
    data_dir = _Under("data")
    env_dir = _Under("env")
    results_path = _Under(RESULTS_FILE)
    report_html = _Under("report.html")
    report_md = _Under("report.md")
    verdict_path = _Under("verdict.json")
    """``verdict.json``: the run's verdict counts, written with the report."""
    reproduce_path = _Under(REPRODUCE_FILE)
    slurm_events_log = _Under("logs", "slurm_events.jsonl")
    slurm_status_file = _Under("logs", "slurm_status.json")
    """The SLURM executor's view of the run's jobs (d5pipe.execute.slurm_status.Feed)."""

    def side_table(self, name: str) -> Path:
        """``warnings``, ``curves``, ``comparisons``, ``accounting``, ``slurm_events`` or ``summary_<stage>`` next to
        results.parquet."""
        return self.root / f"{name}.parquet"

    def shard_plan(self, stage: str, shard: str) -> Path:
        return self.plan_dir / stage / f"{shard}.json"

    def marker(self, stage: str, shard: str) -> Path:
        return self.root / "shards" / stage / f"{shard}.json"

    def attempts(self, stage: str, shard: str) -> Path:
        """Append-only log of the points a shard started (``shards/<stage>/<shard>.attempts``)."""
        return self.root / "shards" / stage / f"{shard}.attempts"

    def started(self, stage: str, shard: str) -> Counter[str]:
        """How often the shard started each of its points (:meth:`attempts`; none when it never ran)."""
        try:
            text = self.attempts(stage, shard).read_text(encoding="utf-8")
        except FileNotFoundError:
            return Counter()
        return Counter(line.strip() for line in text.splitlines() if line.strip())

    def restarted_points(self) -> dict[str, int]:
        """``stage/point_id`` -> starts, of every point of the run that started more than once (a
        killed or requeued job's point started again, or a job ran twice)."""
        out: dict[str, int] = {}
        for path in sorted((self.root / "shards").glob("*/*.attempts")):
            for pid, n in self.started(path.parent.name, path.stem).items():
                if n > 1:
                    out[f"{path.parent.name}/{pid}"] = n
        return out

    def record(self, stage: str, point_id: str) -> Path:
        return self.points_dir / stage / f"{point_id}.json"

    def work(self, stage: str, point_id: str) -> Path:
        return self.root / "work" / stage / point_id

    def profile_dir(self, stage: str) -> Path:
        return self.root / "profiles" / stage

    def mlperf_dir(self, stage: str) -> Path:
        """MLPerf's files of a stage's points: training logs (``<point_id>.log``, d5pipe.measure.mllog),
        LoadGen's summaries and logs (``<point_id>/``); part of the bundle."""
        return self.root / "mlperf" / stage

    def profile_record(self, stage: str, point_id: str) -> Path:
        """The record of a point profiled afterwards (``d5pipe profile``)."""
        return self.profile_dir(stage) / f"{point_id}.json"

    def dataset(self, key: str) -> Path:
        return self.data_dir / f"{key}.npz"

    def dataset_meta(self, key: str) -> Path:
        return self.data_dir / f"{key}.json"

    def env_record(self, env_hash: str) -> Path:
        return self.env_dir / f"{env_hash}.json"

    # --- parsed files ----------------------------------------------------------------------------
    def is_run(self) -> bool:
        return self.index_path.is_file()

    def require_run(self) -> RunDir:
        """``self``, or a one-line error when this is not a d5pipe run directory."""
        if not self.is_run():
            raise D5PipeError(f"{self.root}: not a d5pipe run directory (no plan/index.json)")
        return self

    def _parse(self, path: Path, parse: Callable[[IO[bytes]], Any]) -> Any:
        """``parse`` of the file at ``path``, kept while its inode, size and mtime stay the same."""
        st = os.stat(path)
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        kept = self._parsed.get(path)
        if kept is None or kept[0] != key:
            with open(path, "rb") as fh:
                kept = (key, parse(fh))
        elif isinstance(kept[1], _Written):
            kept = (key, parse(io.BytesIO(kept[1].blob)))
        self._parsed[path] = kept
        return kept[1]

    def write_file(self, path: Path, blob: bytes) -> None:
        """Write ``blob`` to ``path`` atomically (unchanged bytes keep the file and its mtime) and
        keep it as the file's content: this process parses it from memory, never reads it back."""
        from d5pipe.core.atomic import write_if_changed

        write_if_changed(path, blob)
        st = os.stat(path)
        self._parsed[path] = ((st.st_ino, st.st_size, st.st_mtime_ns), _Written(blob))

    def write_json(self, path: Path, data: dict[str, Any], indent: int | None = None) -> None:
        """:meth:`write_file` of ``data`` as sorted JSON (one line unless ``indent``: json's C
        encoder; an indent means its pure-Python one, ~10x slower)."""
        self.write_file(path, (json.dumps(data, indent=indent, sort_keys=True, default=str) + "\n").encode())

    @property
    def config(self) -> dict[str, Any]:
        """``config.yaml`` (the composed, resolved config)."""
        return self._config_file()[1]

    @property
    def config_text(self) -> str:
        """``config.yaml`` as written."""
        return self._config_file()[0]

    def _config_file(self) -> tuple[str, dict[str, Any]]:
        import yaml

        from d5pipe.core.yamlio import safe_load

        def parse(fh: IO[bytes]) -> tuple[str, Any]:
            text = fh.read().decode("utf-8")
            return text, safe_load(text)

        try:
            text, data = self._parse(self.config_path, parse)
        except FileNotFoundError:
            raise D5PipeError(f"{self.root}: no config.yaml (not a d5pipe run directory)") from None
        except yaml.YAMLError as exc:
            raise D5PipeError(f"{self.config_path}: not valid YAML ({exc})") from exc
        if not isinstance(data, dict):
            raise D5PipeError(f"{self.config_path}: not a d5pipe config")
        return text, data

    @property
    def index(self) -> dict[str, Any]:
        """``plan/index.json`` (stages, shards, datasets)."""
        return self.require_run()._parse(self.index_path, json.load)

    @property
    def manifest(self) -> dict[str, Any]:
        """``manifest.json`` ({} when there is none yet)."""
        try:
            data = self._parse(self.manifest_path, json.load)
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as exc:
            raise D5PipeError(f"{self.manifest_path}: invalid JSON ({exc.msg})") from exc
        if not isinstance(data, dict):
            raise D5PipeError(f"{self.manifest_path}: expected a JSON object")
        return data

    @property
    def more_repetitions(self) -> dict[str, int]:
        """``plan/repetitions.json``'s ``"<stage>/<first repetition's ID>" -> repetitions`` ({} when
        there is none)."""
        try:
            data = self._parse(self.repetitions_path, json.load)
        except (FileNotFoundError, NotADirectoryError):  # no run directory (yet), or --out is a file
            return {}
        except json.JSONDecodeError as exc:
            raise D5PipeError(f"{self.repetitions_path}: invalid JSON ({exc.msg})") from exc
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, dict) or not all(isinstance(v, int) and v >= 1 for v in groups.values()):
            raise D5PipeError(f"{self.repetitions_path}: expected {{\"groups\": {{KEY: repetitions >= 1}}}}")
        return {str(k): int(v) for k, v in groups.items()}

    @property
    def looks(self) -> int:
        """How many times the until-decided mode may decide this run's comparisons (1 without it)."""
        try:
            data = self._parse(self.repetitions_path, json.load)
        except (OSError, json.JSONDecodeError):
            return 1
        value = data.get("looks", 1) if isinstance(data, dict) else 1
        return int(value) if isinstance(value, int) and value >= 1 else 1

    def shard_spec(self, stage: str, shard: str) -> dict[str, Any]:
        """``plan/<stage>/<shard>.json``."""
        return self._parse(self.shard_plan(stage, shard), json.load)

    def stages(self) -> list[str]:
        """Planned stages in pipeline order."""
        from d5pipe.levels.registry import STAGE_NAMES

        planned = self.index["stages"]
        return [s for s in STAGE_NAMES if s in planned]

    def shards(self, stage: str) -> list[str]:
        return list(self.index["stages"][stage]["shards"])

    @property
    def planned_ids(self) -> dict[str, list[str]]:
        """Point IDs of the current plan, per stage (records of other configs are ignored)."""
        return {stage: [p["point_id"] for shard in self.shards(stage)
                        for p in self.shard_spec(stage, shard)["points"]]
                for stage in self.stages()}

    def existing_records(self, stage: str) -> set[str]:
        """Point IDs whose record file exists (one directory listing, not one stat per point)."""
        try:
            return {n[:-5] for n in os.listdir(self.points_dir / stage) if _is_record(n)}
        except FileNotFoundError:
            return set()

    def record_mtimes(self, stage: str) -> dict[str, int]:
        """Point ID -> mtime (ns) of its record file (one directory scan)."""
        try:
            with os.scandir(self.points_dir / stage) as it:
                return {e.name[:-5]: e.stat().st_mtime_ns for e in it if _is_record(e.name)}
        except FileNotFoundError:
            return {}

    @property
    def executor(self) -> dict[str, Any]:
        return self.config.get("executor") or {}

    @property
    def experiment(self) -> str:
        return str(self.index.get("experiment") or self.config.get("name") or "")


class _Written:
    """Bytes this process wrote to a file, parsed on first use."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob


def _is_record(name: str) -> bool:
    """A point record's file name (``<id>.json``; dot files are interrupted writes)."""
    return name.endswith(".json") and not name.startswith(".")
