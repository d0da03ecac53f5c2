"""The point record: the one file format a point's result is stored in, and its owner.

``points/<stage>/<point_id>.json`` holds one :class:`Record`. It is written once, atomically, when
the point is done (:meth:`Record.write`), and read through :meth:`Record.read` /
:func:`read_record`, which check ``schema_version``: a record written by a d5pipe with a
format this one does not know is a one-line :class:`RecordVersionError`, never a silent misread.
A file that does not parse is :class:`CorruptRecord` (the shard recomputes that point).

What a stage returns for one point is a :class:`PointOutcome` (metrics, raw samples, extras); the
shard wraps it with identity, status and provenance into a :class:`Record`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import write_text
from d5pipe.core.errors import D5PipeError

RECORD_SCHEMA_VERSION = 1
KNOWN_SCHEMA_VERSIONS: frozenset[int] = frozenset({1})

class RecordVersionError(D5PipeError):
    """A record's ``schema_version`` is missing or unknown to this d5pipe."""


class CorruptRecord(Exception):
    """A record file that is not a JSON object (a torn write by another tool, disk damage)."""


@dataclass
class Record:
    """One point's stored result (``schema_version`` 1; fields as in docs/architecture.md)."""

    experiment: str
    stage: str
    point_id: str
    params: dict[str, Any]
    seed: int | None
    status: str
    error: str | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    env_hash: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    schema_version: int = RECORD_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The fields as stored, ``schema_version`` first."""
        return {"schema_version": self.schema_version,
                **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "schema_version"}}

    def to_json(self) -> str:
        """Compact JSON (one line); non-JSON values are written with ``str``."""
        return json.dumps(self.to_dict(), separators=(",", ":"), default=str) + "\n"

    @staticmethod
    def check_version(data: dict[str, Any], source: str) -> None:
        """Raise :class:`RecordVersionError` unless ``data['schema_version']`` is known."""
        version = data.get("schema_version")
        if version not in KNOWN_SCHEMA_VERSIONS:
            raise RecordVersionError(
                f"{source}: record schema_version {version!r} is not one this d5pipe reads "
                f"({sorted(KNOWN_SCHEMA_VERSIONS)}); use the d5pipe version that wrote it")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "record") -> Record:
        cls.check_version(data, source)
        try:
            return cls(
                experiment=str(data.get("experiment", "")),
                stage=str(data["stage"]),
                point_id=str(data["point_id"]),
                params=dict(data.get("params") or {}),
                seed=data.get("seed"),
                status=str(data.get("status")),
                error=data.get("error"),
                metrics=list(data.get("metrics") or []),
                samples=dict(data.get("samples") or {}),
                extra=dict(data.get("extra") or {}),
                env_hash=data.get("env_hash"),
                provenance=dict(data.get("provenance") or {}),
                schema_version=int(data["schema_version"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptRecord(f"{source}: not a point record ({exc})") from exc

    @classmethod
    def read(cls, path: Path) -> Record:
        """Read and check one record file (FileNotFoundError when there is none)."""
        return cls.from_dict(read_record(path), str(path))

    def write(self, path: Path, durable: bool = True) -> None:
        """Write atomically (temp file + rename): a kill leaves the whole record or none.

        ``durable=False`` skips the fsync (the shard syncs its records in one batch).
        """
        write_text(path, self.to_json(), durable)


def parse_record(text: str | bytes, source: str) -> dict[str, Any]:
    """The JSON object of a record with its version checked (fast path for bulk readers)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CorruptRecord(f"{source}: unreadable record ({exc})") from exc
    if not isinstance(data, dict):
        raise CorruptRecord(f"{source}: record is not a JSON object")
    Record.check_version(data, source)
    return data


def read_record(path: Path) -> dict[str, Any]:
    """The checked JSON object of one record file."""
    with open(path, "rb") as fh:
        return parse_record(fh.read(), str(path))


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write a record given as a dict (tests, tools); it must carry a known schema_version."""
    Record.from_dict({"schema_version": RECORD_SCHEMA_VERSION, **record}, str(path)).write(path)
