"""Seed policy.

One root seed per experiment (config key ``seed``). Every other seed derives from it:

* point seed = ``derive_seed(root, "<stage>/<point_id>")``;
* rank seed  = ``derive_seed(point_seed, "rank<r>")``.

``derive_seed(parent, label)`` is the first 8 bytes of sha256(``"<parent>:<label>"``) as an
unsigned integer, masked to 63 bits: stable across processes and machines, independent of
Python's hash randomisation. All derived seeds are recorded in ``manifest.json`` and the
point records; :func:`check_unique` rejects a sweep whose seeds collide.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Sequence

from d5pipe.core.errors import D5PipeError

SEED_MASK = (1 << 63) - 1


def derive_seed(parent: int, label: str) -> int:
    """A child seed from a parent seed and a label (see module docstring)."""
    h = hashlib.sha256(f"{int(parent)}:{label}".encode()).digest()
    return int.from_bytes(h[:8], "big") & SEED_MASK


def point_seed(root: int, stage: str, point_id: str) -> int:
    return derive_seed(root, f"{stage}/{point_id}")


def point_seeds(root: int, stage: str, point_ids: Iterable[str]) -> list[int]:
    """:func:`point_seed` of many points of one stage (the shared start of the hashed text is
    hashed once)."""
    start = hashlib.sha256(f"{int(root)}:{stage}/".encode())
    out = []
    for pid in point_ids:
        h = start.copy()
        h.update(pid.encode())
        out.append(int.from_bytes(h.digest()[:8], "big") & SEED_MASK)
    return out


def all_distinct(*groups: Sequence[int]) -> bool:
    """Whether no two seeds of ``groups`` (63-bit) are equal, in a few MB whatever their number:
    a first pass marks each seed's bucket (its top 24 bits) in a bitmap, and a second one compares
    exactly only the seeds of buckets marked twice."""
    once, twice = bytearray(1 << 21), bytearray(1 << 21)
    for v in itertools.chain.from_iterable(groups):
        b = v >> 39
        byte, bit = b >> 3, 1 << (b & 7)
        if once[byte] & bit:
            twice[byte] |= bit
        else:
            once[byte] |= bit
    seen: set[int] = set()
    for v in itertools.chain.from_iterable(groups):
        b = v >> 39
        if twice[b >> 3] & (1 << (b & 7)):
            if v in seen:
                return False
            seen.add(v)
    return True


def check_unique(seeds: Iterable[tuple[str, int]]) -> None:
    """Raise D5PipeError when two points share a seed."""
    seen: dict[int, str] = {}
    for name, seed in seeds:
        other = seen.get(seed)
        if other is not None:
            raise D5PipeError(f"seed collision: points {other} and {name} share seed {seed}")
        seen[seed] = name
