"""``python -m d5pipe.execute.rerun CONFIG OUT [REPETITIONS]``: run a composed config into OUT.

The process ``d5pipe ab`` starts for each side of each round (d5pipe.execute.ab), with that side's
environment (its user code first on ``PYTHONPATH``, its variables, the pair's lockstep
directory). Exit codes as ``d5pipe run``: 0 every point passed, 3 some did not, 2 a user error.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import signal

    from d5pipe.core.errors import D5PipeError
    from d5pipe.measure.process import die_with_parent

    die_with_parent(signal.SIGTERM)  # a stopped `d5pipe ab` stops its sides' runs (and their jobs)
    from d5pipe.execute.run import RunDir, run_config_file
    from d5pipe.results.verdicts import read_verdict

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 3):
        print("usage: python -m d5pipe.execute.rerun CONFIG OUT [REPETITIONS]", file=sys.stderr)
        return 2
    try:
        out = run_config_file(Path(args[0]), Path(args[1]), repetitions=int(args[2]) if len(args) == 3 else None)
    except D5PipeError as exc:
        print(f"d5pipe: error: {exc}", file=sys.stderr)
        return 2
    verdict = read_verdict(RunDir.of(out).root)
    return 3 if verdict is None else verdict.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
