"""``d5pipe run EXPERIMENT [overrides...]``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.cli.arguments import (
    add_allow_argument,
    add_until_decided_arguments,
    apply_allow,
    positive_float,
    positive_int,
)
from d5pipe.rundir.layout import RunDir

if TYPE_CHECKING:  # planning imports Hydra: only once the Snakemake process is on its way
    from d5pipe.execute.run import RunOutcome


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", help="name of conf/experiment/NAME.yaml (or in --config-dir)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. train.epochs=3")
    p.add_argument("--out", type=Path, help="run directory (default runs/EXPERIMENT)")
    p.add_argument("--jobs", type=positive_int, help="parallel jobs (default from the executor config)")
    p.add_argument("--executor", choices=["local", "slurm"], help="where jobs run (default local)")
    p.add_argument("--config-dir", action="append", default=[], help="extra config directory")
    p.add_argument("--retry-failed", action="store_true", help="re-run points recorded as failed")
    p.add_argument("--timeout", type=positive_float, help="hard limit in seconds; on expiry Snakemake is "
                   "killed and the run's SLURM jobs are cancelled")
    p.add_argument("--force", action="store_true",
                   help="take over an --out that belongs to another experiment or is not a run directory")
    p.add_argument("-v", "--verbose", action="store_true", help="show Snakemake's full output")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write points and checks as JUnit XML")
    p.add_argument("--history", type=Path, metavar="FILE",
                   help="the history store the finished run is added to (default $D5PIPE_HISTORY, else "
                        "~/.local/share/d5pipe/history.duckdb; d5pipe history)")
    p.add_argument("--no-history", action="store_true",
                   help="do not add the finished run to the history (D5PIPE_HISTORY=off does the same)")
    p.add_argument("--detach", action="store_true",
                   help="SLURM: run the driver itself as a SLURM job and return (survives logout; "
                        "d5pipe status / d5pipe cancel RUN)")
    p.add_argument("--dry-run", action="store_true",
                   help="write the plan into the run directory and list Snakemake's jobs; run nothing")
    add_until_decided_arguments(p)
    add_allow_argument(p)


def _detach(args: argparse.Namespace, argv: list[str]) -> int:
    from d5pipe.core.errors import D5PipeError
    from d5pipe.execute.detach import submit_driver
    from d5pipe.execute.run import default_out, load_plan
    from d5pipe.rundir.ownership import RunLock, check_out_dir, claim

    if args.executor != "slurm":
        raise D5PipeError("--detach needs --executor slurm (a local run has no scheduler to hand over to)")
    plan = load_plan(args.experiment, args.overrides, args.config_dir, args.executor)  # errors now, exit 2
    out = args.out or default_out(plan)
    check_out_dir(out)
    rd = RunDir.of(out)
    with RunLock(rd):  # not in use by a live run; the driver job takes the lock itself
        claim(rd, plan.experiment, args.force)
    rest = [a for a in argv if a != "--detach"]
    if args.out is None:
        rest += ["--out", str(out)]
    job = submit_driver(rd, plan.config["executor"], ["run", *rest], plan.experiment)
    print(f"d5pipe: the driver runs as SLURM job {job}; `d5pipe status {out}` shows it, "
          f"`d5pipe cancel {out}` stops the run")
    return 0


def _run(args: argparse.Namespace, out: Path | None = None) -> RunOutcome:
    """``d5pipe.execute.run.execute_plan`` of the composed plan, with the points whose user code
    changed named first."""
    from d5pipe.config.schema import forks_repetitions
    from d5pipe.execute import fork_server
    from d5pipe.execute.snakemake_run import discard, start_snakemake

    started = start_snakemake()  # imports Snakemake on another core while this process plans
    server = None
    try:
        from d5pipe.cli.cmd_plan import code_stale
        from d5pipe.execute.run import default_out, execute_plan, load_plan

        plan = load_plan(args.experiment, args.overrides, args.config_dir, args.executor, out or args.out)
        if forks_repetitions(plan.config["executor"]) and not args.dry_run:
            server = fork_server.start()  # imports torch on another core while the run is prepared
        out = Path(out or args.out) if (out or args.out) else default_out(plan)
        for line in code_stale(plan, out):
            print(f"d5pipe: {line}", flush=True)
        ov = list(args.overrides) + ([f"executor={args.executor}"] if args.executor else [])
        return execute_plan(plan, out, ov, jobs=args.jobs, retry_failed=args.retry_failed, timeout=args.timeout,
                            dry_run=args.dry_run, force=args.force, verbose=args.verbose, started=started,
                            fork_server=server)
    finally:
        discard(started)
        fork_server.discard(server)


def _until_decided(args: argparse.Namespace, outcome: RunOutcome) -> RunOutcome:
    """More rounds while side-by-side pairs are inconclusive (d5pipe.execute.decide)."""
    import time

    from d5pipe.execute.decide import grow, set_looks, undecided, wants_of_pairs
    from d5pipe.execute.jobs import write_outputs
    from d5pipe.plan.point_config import fewest_repetitions
    from d5pipe.results.repetition_values import planned_looks

    t0 = time.perf_counter()
    rd = RunDir.of(outcome.run_dir)
    looks = planned_looks(fewest_repetitions(rd.config), args.max_repetitions)
    if rd.looks != looks:  # every look, the first one too, decides at alpha / looks
        set_looks(outcome.run_dir, looks)
        outcome = type(outcome)(outcome.run_dir, write_outputs(rd.root))
    last, rounds = 0.0, 1
    while time.perf_counter() - t0 + last <= args.budget:  # no new round past the budget
        wants = wants_of_pairs(outcome.run_dir, args.max_repetitions)
        if not wants or not grow(outcome.run_dir, wants, looks):
            break
        print(f"d5pipe: until decided: round {rounds + 1}: more repetitions of {len(wants)} configuration(s)",
              flush=True)
        start = time.perf_counter()
        outcome = _run(args, out=outcome.run_dir)
        last, rounds = time.perf_counter() - start, rounds + 1
    left = undecided([outcome.run_dir])
    print(f"d5pipe: until decided: {rounds} round(s); "
          + (f"{len(left)} pair(s) still inconclusive: {'; '.join(left[:5])}" if left else "every pair decided"),
          flush=True)
    return outcome


def main(args: argparse.Namespace) -> int:
    apply_allow(args.allow)
    if args.detach:
        return _detach(args, list(args.argv))
    outcome = _run(args)
    if args.until_decided and outcome.verdict is not None:
        outcome = _until_decided(args, outcome)
    rd = RunDir.of(outcome.run_dir)
    if outcome.verdict is None:
        print(f"planned (dry run): {rd.root.resolve()}")
        return 0
    if args.junit is not None:
        from d5pipe.results.columns import load_results
        from d5pipe.results.junit import write_junit
        from d5pipe.results.verdicts import point_verdicts

        results = load_results(rd.root)  # as the run just wrote them
        write_junit(results, point_verdicts(results), args.junit)
    if not args.no_history:
        from d5pipe.cli.cmd_history import append_finished_run  # after the run: not on its start-up path

        append_finished_run(rd.root, args.history)
    print(f"report: {rd.report_html.resolve()}")
    print(f"d5pipe: {outcome.verdict.line(str(rd.report_html))}")
    return outcome.verdict.exit_code
