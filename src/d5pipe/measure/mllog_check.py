"""MLPerf's compliance checker on a training log (d5pipe.measure.mllog), as a check of the point.

Two rulesets run, each in a checker of its own (a later ruleset of one checker silences an
earlier one's messages about the same keys):

* MLPerf's training rules of :data:`RULESET` (``training_<RULESET>/common.yaml`` with the open
  division's ``open_common.yaml``, which it would enqueue), less the rules in :data:`NOT_APPLICABLE`,
  which no benchmark but MLPerf's own can satisfy; the composed copy that ran is kept;
* d5pipe's rules (``mllog_rules.yaml``): one ``run_start`` and one ``run_stop`` with a status, the
  seed and global batch size of the point's config, evaluations in time order.

The outcome is ``pass`` or ``fail`` with the checker's messages, each naming its rule (key).

The checker's parser (:func:`parse_log`) reads every MLPerf-format log d5pipe reads: these logs, a
published result's (d5pipe.results.mlperf_result) and LoadGen's detail log (level 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from d5pipe.core.atomic import write_if_changed, write_text
from d5pipe.core.outcome import Declared, Metric
from d5pipe.measure.mllog import DIVISION

RULESET = "6.1.0"
"""The MLPerf training rules the logs are checked against."""
NOT_APPLICABLE: dict[str, str] = {
    "submission_benchmark": "its value must name one of MLPerf's benchmarks, whose own rules (open_<benchmark>.yaml: "
                            "reference hyperparameters, target quality) it then enqueues",
}
"""Official rules left out, and why (the README names them too)."""
METRIC = "mllog_check"
DECLARED: dict[str, Declared] = {
    METRIC: Declared("", "verdict", None, "the point's MLPerf log (RUN/mlperf/<stage>/<point_id>.log) under MLPerf's "
                     f"compliance checker: training {RULESET} common and open rules, and d5pipe's (extra.mllog)"),
}
"""What the check's metric means (levels 2 and 3 list it among their metrics)."""


@dataclass
class Compliance:
    """What the checker said about one log."""

    passed: bool
    messages: list[str] = field(default_factory=list)
    rulesets: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """MLPerf's warnings (a key required once found twice with the same value)."""

    def metric(self) -> Metric:
        detail = None if self.passed else "; ".join(m.splitlines()[0] for m in self.messages[:3])
        return Metric(METRIC, "pass" if self.passed else "fail", kind="verdict", detail=detail)

    def record(self, log: str) -> dict[str, Any]:
        return {"log": log, "passed": self.passed, "messages": self.messages, "rulesets": self.rulesets, "warnings": self.warnings,
                "not_applicable": NOT_APPLICABLE}


def official_rules(directory: Path) -> Path:
    """MLPerf's common training rules of :data:`RULESET` with the open division's in place of what it
    enqueues, less :data:`NOT_APPLICABLE`, as one ruleset written to ``directory`` (MLPerf's own
    checker takes it: ``python -m mlperf_logging.compliance_checker --config <it> <log>``)."""
    out = directory / f"mlperf_training_{RULESET}_{DIVISION}.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    write_if_changed(out, _official_text().encode())  # the same for every point of a run
    return out


@lru_cache(maxsize=1)
def _official_text() -> str:
    """:func:`official_rules`' ruleset, composed once a process."""
    from mlperf_logging import compliance_checker

    root = Path(compliance_checker.__file__).parent / f"training_{RULESET}"
    common = yaml.safe_load((root / "common.yaml").read_text(encoding="utf-8"))
    division = yaml.safe_load((root / f"{DIVISION}_common.yaml").read_text(encoding="utf-8")) or []
    assert not any("BEGIN" in r for r in division), "a division ruleset with a BEGIN block of its own"
    named = {r["KEY"]["NAME"] for r in division if "KEY" in r}  # the division's rule for a key replaces common's
    rules = [r for r in common if not ("KEY" in r and r["KEY"]["NAME"] in named)] + division
    rules = [r for r in rules if not ("KEY" in r and r["KEY"]["NAME"] in NOT_APPLICABLE)]
    for r in rules:
        post = r.get("KEY", {}).get("POST")
        if isinstance(post, str) and "enqueue_config" in post:  # the division's rules are in already
            r["KEY"]["POST"] = ";".join(s for s in post.split(";") if "enqueue_config" not in s).strip() or "None"
    return str(yaml.safe_dump(rules, sort_keys=False))


def d5pipe_rules(scratch: Path, seed: int, global_batch_size: int) -> Path:
    """d5pipe's ruleset with the point's seed and global batch size (integers) in place."""
    text = resources.files("d5pipe.measure").joinpath("mllog_rules.yaml").read_text(encoding="utf-8")
    text = text.replace("__SEED__", str(int(seed))).replace("__GLOBAL_BATCH_SIZE__", str(int(global_batch_size)))
    out = scratch / "d5pipe_rules.yaml"
    write_text(out, text, durable=False)
    return out


def _run(lines: list[Any], rules: Path, strict: bool) -> tuple[list[str], list[str]]:
    """(messages, warnings) of one checker; ``strict``: its warnings are messages (``--werror``)."""
    from mlperf_logging.compliance_checker import mlp_compliance

    mlp_compliance.enqueued_configs.clear()  # module state: left over by an earlier check that raised
    checker = mlp_compliance.make_checker("training", RULESET, quiet=False, werror=strict)
    try:
        checker.check_loglines(lines, str(rules))
    except Exception as exc:  # noqa: BLE001 - the checker's own failure is the check's outcome
        return [f"the compliance checker failed on {rules.name}: {type(exc).__name__}: {exc}"], []
    finally:
        mlp_compliance.enqueued_configs.clear()
    return [*checker.overwritable.values(), *checker.not_overwritable], list(checker.warnings.values())


def parse_log(path: Path) -> tuple[list[Any], list[tuple[str, str]]]:
    """**The one parser of ``:::MLLOG`` lines** (a training log, a published result's, LoadGen's detail
    log): mlperf_logging's parser of :data:`RULESET` (one line format for every ruleset). Its lines in
    order (``LogLine``: ``key``, ``timestamp``, ``value`` as ``{"value": ..., "metadata": {...}}``), and
    each line it could not parse with why. A line without ``time_ms``, ``key``, ``value`` or
    ``metadata`` (LoadGen and mllog write all four) raises ``KeyError``."""
    from mlperf_logging.compliance_checker import mlp_parser

    lines, errors = mlp_parser.parse_file(str(path), ruleset=RULESET)
    return list(lines), list(errors)


def check_log(log: Path, seed: int, global_batch_size: int, rules_dir: Path, scratch: Path) -> Compliance:
    """Both rulesets on ``log`` (d5pipe's strictly: a key it requires once, found twice with the same
    value, fails rather than warns); MLPerf's goes to ``rules_dir``, d5pipe's (the point's seed and
    batch size in it) to ``scratch``."""
    # the checker reads a relative ruleset path from its own directory
    scratch, rules_dir = Path(scratch).resolve(), Path(rules_dir).resolve()
    lines, errors = parse_log(log)
    messages = [f"line not parsed: {error}: {line.strip()[:120]}" for line, error in errors]
    official, ours = official_rules(rules_dir), d5pipe_rules(scratch, seed, global_batch_size)
    found, warnings = _run(lines, official, strict=False)
    strict, _ = _run(lines, ours, strict=True)
    messages += [*found, *strict]
    return Compliance(not messages, messages, [official.name, ours.name], warnings)
