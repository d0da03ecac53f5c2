"""MLPerf-format training logs read as results: a published MLPerf result (its logs, one per run) or a
d5pipe run's own logs (``RUN/mlperf/<stage>/<point_id>.log``, d5pipe.measure.mllog), summarised the
way MLPerf's ``result_summarizer`` scores a benchmark, so the two can be set side by side.

Per log (one run): ``time_to_train_s``, run_start to run_stop (result_summarizer's score, in
seconds); ``eval_accuracy``, the last evaluation; ``samples_per_s``, the samples trained (the
largest ``samples_count`` logged, else the last ``epoch_num`` x ``train_samples``) over that time;
the ``run_stop`` status. Over a result's runs: the olympic mean of the times (result_summarizer's own
``_compute_olympic_average``: the fastest and the slowest run dropped) from three runs on, the plain
mean below that (the summary says which).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5pipe.core.atomic import file_sha256, read_json
from d5pipe.core.errors import D5PipeError
from d5pipe.measure.mllog_check import parse_log

if TYPE_CHECKING:
    from d5pipe.results.timing_compare import TimingComparison

MARKER = ":::MLLOG"


@dataclass(frozen=True)
class MlperfRun:
    """One MLPerf-format log."""

    path: str
    benchmark: str
    org: str
    platform: str
    division: str
    status: str
    time_to_train_s: float
    started_ms: float
    """``run_start``, milliseconds since the epoch."""
    accuracy: float | None
    samples: int | None
    sha256: str

    @property
    def samples_per_s(self) -> float | None:
        return self.samples / self.time_to_train_s if self.samples and self.time_to_train_s > 0 else None


def is_mllog(path: Path) -> bool:
    """Whether ``path`` is a file whose first non-empty line is an MLPerf log line (a directory:
    whether it holds such files and nothing else but subdirectories)."""
    path = Path(path)
    if path.is_dir():
        files = [p for p in path.iterdir() if p.is_file()]
        return bool(files) and all(is_mllog(p) for p in files)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    return MARKER in line
    except OSError:
        return False
    return False


def log_files(path: Path) -> list[Path]:
    """The logs ``path`` names: itself, or a directory's files, sorted."""
    path = Path(path)
    return sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]


def read_log(path: Path) -> MlperfRun:
    """One log through mlperf_logging's parser (d5pipe.measure.mllog_check.parse_log); a log without
    run_start/run_stop is a user error."""
    lines, errors = parse_log(path)
    if errors:
        raise D5PipeError(f"{path}: not an MLPerf log: line {errors[0][0].strip()[:80]!r} ({errors[0][1]})")
    values: dict[str, list[Any]] = {}
    stamps: dict[str, float] = {}
    counts: list[int] = []
    status = ""
    last_epoch: float | None = None
    for ll in lines:
        values.setdefault(ll.key, []).append(ll.value.get("value"))
        stamps.setdefault(ll.key, float(ll.timestamp))
        meta = ll.value.get("metadata") or {}
        if isinstance(meta.get("samples_count"), (int, float)):
            counts.append(int(meta["samples_count"]))
        if ll.key == "run_stop":
            stamps["run_stop"], status = float(ll.timestamp), str(meta.get("status", ""))
        if ll.key == "eval_accuracy" and isinstance(meta.get("epoch_num"), (int, float)):
            last_epoch = float(meta["epoch_num"])
    if "run_start" not in stamps or "run_stop" not in stamps:
        raise D5PipeError(f"{path}: an MLPerf log without {'run_start' if 'run_start' not in stamps else 'run_stop'}"
                          "; no time to train")

    def first(key: str, default: Any = "") -> Any:
        return (values.get(key) or [default])[0]

    accuracies = [float(v) for v in values.get("eval_accuracy", []) if isinstance(v, (int, float))]
    samples = max(counts) if counts else None
    if samples is None and last_epoch is not None and isinstance(first("train_samples", None), (int, float)):
        samples = int(last_epoch * float(first("train_samples")))
    return MlperfRun(
        path=str(path), benchmark=str(first("submission_benchmark")), org=str(first("submission_org")),
        platform=str(first("submission_platform")), division=str(first("submission_division")), status=status,
        time_to_train_s=(stamps["run_stop"] - stamps["run_start"]) / 1000.0, started_ms=stamps["run_start"],
        accuracy=accuracies[-1] if accuracies else None, samples=samples,
        sha256=file_sha256(path))


def olympic_mean(values: list[float]) -> tuple[float, str]:
    """MLPerf's mean of a result's runs: result_summarizer's olympic average (one fastest and one
    slowest dropped) from three runs on, else the plain mean; and which it was."""
    from mlperf_logging.result_summarizer.result_summarizer import _compute_olympic_average

    if len(values) >= 3:
        return float(_compute_olympic_average(sorted(values), 0, 1)), f"olympic mean of {len(values)} runs"
    return (sum(values) / len(values) if values else math.nan), f"mean of {len(values)}; olympic from 3 runs"


@dataclass(frozen=True)
class Summary:
    """A result's runs, summarised as result_summarizer would."""

    label: str
    runs: tuple[MlperfRun, ...]

    def time_to_train(self) -> tuple[float, str]:
        return olympic_mean(self.times())

    def times(self) -> list[float]:
        """The successful runs' times to train (MLPerf scores no other)."""
        return [r.time_to_train_s for r in self.runs if r.status == "success"]

    def line(self) -> str:
        ttt, how = self.time_to_train()
        rates = [r.samples_per_s for r in self.runs if r.samples_per_s]
        accs = [r.accuracy for r in self.runs if r.accuracy is not None]
        ok = sum(r.status == "success" for r in self.runs)
        rate = f"{len(rates) / sum(1 / x for x in rates):.1f} samples/s (harmonic mean)" if rates else "samples/s n/a"
        acc = f"accuracy {sum(accs) / len(accs):.4f}" if accs else "accuracy n/a"
        return (f"{self.label}: {len(self.runs)} run(s), {ok} success; time to train {ttt:.3f} s ({how}); "
                f"{rate}; {acc}")


def run_summaries(run_dir: Path) -> list[Summary]:
    """A d5pipe run's own MLPerf logs, one summary per configuration (its repetitions together)."""
    from d5pipe.core.canonical import canonical_json
    from d5pipe.plan.point_config import REPEAT_AXIS
    from d5pipe.rundir.layout import RunDir

    rd = RunDir.of(run_dir)
    groups: dict[tuple[str, str], list[MlperfRun]] = {}
    labels: dict[tuple[str, str], str] = {}
    for log in sorted(Path(run_dir).glob("mlperf/*/*.log")):
        stage, pid = log.parent.name, log.stem
        params = read_json(rd.record(stage, pid), {}).get("params") or {}
        params = {k: v for k, v in params.items() if k != REPEAT_AXIS}
        key = (stage, canonical_json(params))
        groups.setdefault(key, []).append(read_log(log))
        labels[key] = " ".join([stage, *(f"{k}={v}" for k, v in sorted(params.items()))])
    return [Summary(labels[k], tuple(v)) for k, v in groups.items()]


def logs_summary(path: Path) -> Summary:
    """Published MLPerf logs (a file, or a directory of them) as one result."""
    runs = tuple(read_log(p) for p in log_files(path))
    first = runs[0]
    return Summary(f"{first.benchmark or path.name} ({first.org}, {first.platform})", runs)


def side(path: Path) -> list[Summary]:
    """What one side of ``compare`` holds: published logs (one result), or a run's own logs."""
    summaries = [logs_summary(path)] if is_mllog(path) else run_summaries(path)
    if not summaries:
        raise D5PipeError(f"{path}: no MLPerf logs (a d5pipe run writes them at levels 2 and 3 unless mlperf.log "
                          "is false)")
    return summaries


@dataclass
class MlperfComparison:
    """Two sides' MLPerf results: the printed lines and each decided time to train (A's label, B's label, it)."""

    lines: list[str]
    timings: list[tuple[str, str, TimingComparison]]

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": 1, "mlperf": [{"a": a, "b": b, **t.to_dict()} for a, b, t in self.timings]}


def compare_results(a: Path, b: Path, policy: Any = None) -> MlperfComparison:
    """MLPerf logs (``a`` or ``b``, or both) beside the other side: each result summarised, and each
    of B's times to train against A's (A's one result, or the one of the same label), decided by
    d5pipe's timing comparison over the runs (unpaired)."""
    from d5pipe.results.timing_compare import compare_one

    sa, sb = side(a), side(b)
    out = MlperfComparison(["MLPerf results side by side (time to train: run_start to run_stop of each run, as "
                            "MLPerf's result_summarizer scores it; successful runs only)"], [])
    out.lines += [f"A {s.line()}" for s in sa] + [f"B {s.line()}" for s in sb]
    by_label = {s.label: s for s in sa}
    for s in sb:
        ref = sa[0] if len(sa) == 1 else by_label.get(s.label)
        if ref is None:
            out.lines.append(f"B {s.label}: no result of that configuration in A")
            continue
        t = compare_one("time_to_train_s", "s", ref.times(), s.times(), policy)
        out.lines.append(f"time to train, B {s.label} / A {ref.label}: {t.label()}; {t.text()}")
        out.timings.append((ref.label, s.label, t))
    return out
