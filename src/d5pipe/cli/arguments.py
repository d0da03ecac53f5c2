"""Argument types shared by the subcommands: a bad value is argparse's one-line error, exit 2 (a bad
``KEY=VALUE`` item, :func:`key_values`, a D5PipeError's one line, exit 2 as well)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TypeVar

from d5pipe.core.errors import D5PipeError

N = TypeVar("N", int, float)


def _number(text: str, ok: Callable[[N], bool], what: str, kind: type[N]) -> N:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{value:g} must be {what}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (``--jobs``)."""
    return _number(text, lambda v: v >= 1, ">= 1", int)


def positive_float(text: str) -> float:
    """A number > 0 (``--timeout`` seconds)."""
    return _number(text, lambda v: 0 < v < float("inf"), "> 0", float)


def fraction(text: str) -> float:
    """A level between 0 and 1 (``--alpha``)."""
    return _number(text, lambda v: 0 < v < 1, "between 0 and 1", float)


def percent(text: str) -> float:
    """A percentage above 0 (``--margin``)."""
    return _number(text, lambda v: 0 < v < 1000, "a percentage above 0", float)


def percent_or_zero(text: str) -> float:
    """A percentage, 0 allowed (``--run-noise``)."""
    return _number(text, lambda v: 0 <= v < 1000, "a percentage, 0 or more", float)


def key_values(items: Sequence[str], flag: str, form: str = "KEY=VALUE",
               key_ok: Callable[[str], bool] = bool) -> dict[str, str]:
    """The ``KEY=VALUE`` items of a repeatable ``flag`` (``--param``, ``--env-a``) as a dict, each value
    the text after the first ``=`` (a later item of a key wins); an item without ``=``, or whose key
    ``key_ok`` refuses (default: an empty one), is a one-line error that names ``form``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key_ok(key):
            raise D5PipeError(f"{flag} {item!r}: expected {form}")
        out[key] = value
    return out


ALLOW_HELP = ("allow importing plug-in targets under this package or module prefix (repeatable; also "
              "$D5PIPE_ALLOW and ~/.config/d5pipe/allow.yaml; d5pipe is always allowed)")


def add_allow_argument(p: argparse.ArgumentParser) -> None:
    """``--allow PREFIX`` (repeatable): the allow-list of the person running d5pipe for plug-in imports."""
    p.add_argument("--allow", action="append", default=[], metavar="PREFIX", help=ALLOW_HELP)


def apply_allow(prefixes: list[str]) -> None:
    """Put ``--allow`` into ``$D5PIPE_ALLOW`` of this process (Snakemake's jobs inherit it), and
    make ``$PYTHONPATH`` absolute: the jobs run in the run directory and the level-3 ranks in
    their session directory, where a relative entry (``PYTHONPATH=examples/byo``) means nothing."""
    import os

    from d5pipe.core.allowlist import allow

    allow(prefixes)
    entries = os.environ.get("PYTHONPATH", "")
    if entries:
        os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(e) if e else e for e in entries.split(os.pathsep))


def add_until_decided_arguments(p: argparse.ArgumentParser, on: bool = False) -> None:
    """``--until-decided``, ``--budget``, ``--max-repetitions`` (``run`` and ``plan``: off unless
    asked; ``ab``: ``on``, ``--no-until-decided`` turns it off)."""
    what = ("measure more repetitions of every configuration with an inconclusive comparison until each "
            "is decided or the budget is spent")
    if on:
        p.add_argument("--until-decided", action=argparse.BooleanOptionalAction, default=True,
                       help=what + " (default; --no-until-decided: the given repetitions only)")
    else:
        p.add_argument("--until-decided", action="store_true", help=what)
    p.add_argument("--budget", type=positive_float, default=600.0, metavar="S",
                   help="until decided: no new round after S seconds in all (default 600)")
    p.add_argument("--max-repetitions", type=positive_int, default=20,
                   help="until decided: at most this many repetitions per configuration (default 20)")
