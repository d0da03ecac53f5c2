"""One stage's points, fast: what depends on a sweep's distinct values is computed once per value.

A 100,000-point grid is mostly the same config with a few axes set. So, per stage:

* each axis value is normalised once (d5pipe.core.canonical.normalise), not once per point;
* the point check, the user targets and the identity files of a point depend only on the keys its
  level says they read (``check_reads`` of d5pipe.levels.stage.Level): they run once per distinct
  combination of the swept values of those keys (every point when a level does not say);
* a point's ID hashes the canonical JSON of ``{stage, config}``; that text is the stage base's with
  the axis values at known places, so it is built from a template (:class:`IdTemplate`) by joining
  the values' canonical JSON, the same bytes d5pipe.core.canonical.canonical_json gives;
* the dataset key depends only on the ``dataset`` axes.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from d5pipe.core.canonical import canonical_json, digest, normalise
from d5pipe.core.errors import D5PipeError
from d5pipe.levels.stage import Level
from d5pipe.plan.point_config import REPEAT_AXIS, set_dotted

_MARK = "@@d5pipe-axis-{}@@"
T = TypeVar("T")


class IdTemplate:
    """The canonical JSON of ``{"stage": ..., "config": base}`` with one hole per axis (and one for
    the repetition index when ``repeat``): :meth:`text` fills the holes with the canonical JSON of
    a point's values."""

    def __init__(self, stage: str, base: dict[str, Any], axes: Sequence[str], repeat: bool) -> None:
        keys = [*axes, *([REPEAT_AXIS] if repeat else [])]
        cfg = base
        for i, key in enumerate(keys):
            cfg = set_dotted(cfg, key, _MARK.format(i))
        text = canonical_json({"stage": stage, "config": cfg}, normalised=True)
        self.parts: list[str] = []
        self.holes: list[int] = []
        rest = text
        while True:
            found = [(rest.find(f'"{_MARK.format(i)}"'), i) for i in range(len(keys))]
            found = [(pos, i) for pos, i in found if pos >= 0]
            if not found:
                self.parts.append(rest)
                break
            pos, i = min(found)
            self.parts.append(rest[:pos])
            self.holes.append(i)
            rest = rest[pos + len(_MARK.format(i)) + 2:]
        self.ok = sorted(self.holes) == list(range(len(keys)))
        # the text before the first hole is the same for every point: hashed once, copied per point;
        # the rest is one %-format string, its values in the order of the holes (``%`` doubled)
        self.head = hashlib.sha256(self.parts[0].encode("ascii"))
        self.rest = "".join("%s" + part.replace("%", "%%") for part in self.parts[1:])

    def hex12(self, values: Sequence[str]) -> str:
        """The first 12 hex digits of the sha256 of the canonical JSON with ``values`` (canonical
        JSON texts, in axis order) in the holes (its head hashed once)."""
        return self.hex12_in_order(tuple([values[h] for h in self.holes]))

    def hex12_in_order(self, values: tuple[str, ...]) -> str:
        """:meth:`hex12` of ``values`` given in the order of the holes."""
        h = self.head.copy()
        h.update((self.rest % values).encode("ascii"))
        return h.hexdigest()[:12]


def nested_axes(axes: Sequence[str]) -> bool:
    """Whether one axis lies inside another (``a.b`` and ``a.b.c``): no template then."""
    return any(b.startswith(a + ".") for a in axes for b in axes if a != b)


def reads_key(key: str, reads: Sequence[str]) -> bool:
    return any(key == r or key.startswith(r + ".") for r in reads)


def reading_axes(axes: Sequence[str], reads: Sequence[str] | None) -> list[int]:
    """The indices of the axes that lie under ``reads`` (every axis when None)."""
    return list(range(len(axes))) if reads is None else [i for i, a in enumerate(axes) if reads_key(a, reads)]


class StagePoints:
    """The checked points of one stage, with what their IDs, costs and datasets need."""

    def __init__(self, level: Level, base: dict[str, Any], axes: tuple[str, ...],
                 points: Sequence[tuple[Any, ...]], code_cache: Any) -> None:
        self.level, self.base, self.axes, self.points = level, base, axes, list(points)
        canon: dict[int, tuple[Any, str]] = {}
        self.values: list[tuple[Any, ...]] = []
        self.texts = PointTexts(len(axes))
        for values in self.points:
            norm, text = [], []
            for v in values:
                hit = canon.get(id(v))
                if hit is None:
                    n = normalise(v)
                    hit = canon[id(v)] = (n, canonical_json(n, normalised=True))
                norm.append(hit[0])
                text.append(hit[1])
            # the point's own tuple when normalising changed nothing (ints, strings): no copy
            self.values.append(values if all(n is v for n, v in zip(norm, values)) else tuple(norm))
            self.texts.append(tuple(text))
        self._keep = list(canon)  # the ids above stay valid while the values live
        self.check_idx = reading_axes(axes, level.check_reads)
        self.code: list[dict[str, str]] = []
        self.builds: list[dict[str, dict[str, Any]]] = []
        """Per point, what it needs built (d5pipe.levels.stage.Level.builds)."""
        checked: dict[tuple[str, ...], tuple[dict[str, str], dict[str, dict[str, Any]]]] = {}
        for values, texts in zip(self.values, self.texts):
            key = tuple(texts[i] for i in self.check_idx)
            seen = checked.get(key)
            if seen is None:
                cfg = self.config(values)
                try:
                    level.check_point(cfg)
                    seen = checked[key] = ({**_code_of(level, cfg, code_cache), **level.identity_files(cfg)},
                                           level.builds(cfg))
                except D5PipeError as exc:
                    raise _point_error(level.name, dict(zip(axes, values)), exc) from None
            self.code.append(seen[0])
            self.builds.append(seen[1])
        fast = not nested_axes(axes) and REPEAT_AXIS not in axes
        self.templates = {rep: IdTemplate(level.name, base, axes, rep) for rep in (False, True)} if fast else {}

    def config(self, values: Sequence[Any]) -> dict[str, Any]:
        cfg = self.base
        for k, v in zip(self.axes, values):
            cfg = set_dotted(cfg, k, v)
        return cfg

    def point_id(self, k: int, rep: int, prefix: str) -> str:
        """The ID of point ``k``'s repetition ``rep`` (d5pipe.plan.build.point_id, faster)."""
        code = self.code[k]
        template = self.templates.get(rep > 0)
        if code or template is None or not template.ok:
            cfg = self.config(self.values[k])
            if rep:
                cfg = {**cfg, REPEAT_AXIS: rep}
            data: dict[str, Any] = {"stage": self.level.name, "config": cfg}
            if code:
                data["code"] = dict(code)
            return f"{prefix}-{digest(data, 12, normalised=True)}"
        texts = [*self.texts[k], str(rep)] if rep else list(self.texts[k])
        return f"{prefix}-{template.hex12(texts)}"


    def point_ids(self, ks: Sequence[int], rep: int, prefixes: Sequence[str]) -> list[str]:
        """:meth:`point_id` of points ``ks``'s repetition ``rep`` (``prefixes[k]``: point ``k``'s
        readable prefix; or, given ``first_ids``, the IDs of repetition 0, whose prefix it is)."""
        template = self.templates.get(rep > 0)
        if template is None or not template.ok:
            return [self.point_id(k, rep, prefixes[k]) for k in ks]
        code, hex12 = self.code, template.hex12_in_order
        # per hole, the distinct texts of its axis and each point's index into them (the
        # repetition's hole: one text, index 0 for every point)
        columns = [*zip(self.texts.distinct, self.texts.positions), ([str(rep)], array("I", bytes(4 * len(code))))]
        in_order = [columns[h] for h in template.holes]
        return [self.point_id(k, rep, prefixes[k]) if code[k]
                else f"{prefixes[k]}-{hex12(tuple([distinct[index[k]] for distinct, index in in_order]))}" for k in ks]


class PointTexts(Sequence[tuple[str, ...]]):
    """Per point, the canonical JSON texts of its values, kept as one small index per axis and
    point into that axis's distinct texts (a tuple is made when read)."""

    def __init__(self, n_axes: int) -> None:
        self.distinct: list[list[str]] = [[] for _ in range(n_axes)]
        self._where: list[dict[str, int]] = [{} for _ in range(n_axes)]
        self.positions = [array("I") for _ in range(n_axes)]
        self.n = 0

    def append(self, texts: Sequence[str]) -> None:
        for where, distinct, index, text in zip(self._where, self.distinct, self.positions, texts):
            i = where.get(text)
            if i is None:
                i = where[text] = len(distinct)
                distinct.append(text)
            index.append(i)
        self.n += 1

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        columns = list(zip(self.distinct, self.positions))
        for k in range(self.n):
            yield tuple([distinct[index[k]] for distinct, index in columns])

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self.n))]
        if k < 0:
            k += self.n
        if not 0 <= k < self.n:
            raise IndexError(k)
        return tuple([distinct[index[k]] for distinct, index in zip(self.distinct, self.positions)])


class PrefixesOf(Sequence[str]):
    """The readable prefixes of points, read off their first repetition's IDs (``<prefix>-<12 hex>``)
    instead of kept beside them."""

    def __init__(self, first_ids: Sequence[str]) -> None:
        self.first_ids = first_ids

    def __len__(self) -> int:
        return len(self.first_ids)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [pid[:-13] for pid in self.first_ids[k]]
        return self.first_ids[k][:-13]


class _Compact(Sequence[T]):
    """A plan's per-point sequence of :attr:`ks` positions, its items made when read; equal to
    any sequence of the same items, like the list it stands for."""

    ks: Sequence[int]
    _noun = "items"

    def __len__(self) -> int:
        return len(self.ks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}({list(self)!r})" if len(self) <= 8 else f"{name}({len(self)} {self._noun})"


class RepeatedPoints(_Compact[tuple[Any, ...]]):
    """A stage's planned points with the repetition index as the last value, made when read: point
    ``i`` is ``(*configurations[ks[i]], reps[i])``. Two small integer arrays instead of one tuple
    per planned point (a 100,000-configuration sweep in 3 repetitions plans 300,000)."""

    _noun = "points"

    def __init__(self, configurations: Sequence[tuple[Any, ...]], ks: Sequence[int], reps: Sequence[int]) -> None:
        self.configurations = configurations
        self.ks = array("I", ks)
        self.reps = array("I", reps)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [(*self.configurations[k], r) for k, r in zip(self.ks[i], self.reps[i])]
        return (*self.configurations[self.ks[i]], self.reps[i])

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        conf = self.configurations
        return ((*conf[k], r) for k, r in zip(self.ks, self.reps))


def _code_of(level: Level, cfg: dict[str, Any], cache: Any) -> dict[str, str]:
    """Module -> source hash of the user targets ``cfg`` uses (allow-list checked by check_point)."""
    code: dict[str, str] = {}
    for _key, path in level.used_targets(cfg):
        mc = cache.of(path)
        if mc is not None:
            code[mc.module] = mc.sha256
    return code


def _point_error(stage: str, params: dict[str, Any], exc: D5PipeError) -> D5PipeError:
    where = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return D5PipeError(f"{exc} (sweep point {stage} {where})" if where else str(exc))


class Gathered(_Compact[Any]):
    """Per planned point, its configuration's value: ``values[ks[i]]`` (a configuration's
    repetitions share their cost, dataset key and modules; one pointer each is not kept)."""

    _noun = "values"

    def __init__(self, values: Sequence[Any], ks: Sequence[int]) -> None:
        self.values, self.ks = values, ks

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.values[k] for k in self.ks[i]]
        return self.values[self.ks[i]]

    def __iter__(self) -> Iterator[Any]:
        values = self.values
        return (values[k] for k in self.ks)
