"""Safe YAML with libyaml's C parser and emitter when PyYAML has them (same safe constructor and
resolver as ``yaml.safe_load``/``yaml.safe_dump``; about ten times faster on a run's config)."""

from __future__ import annotations

from typing import IO, Any

import yaml

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def safe_load(stream: str | bytes | IO[str] | IO[bytes]) -> Any:
    return yaml.load(stream, Loader=_LOADER)  # noqa: S506 - a safe loader


def safe_dump(data: Any, **kwargs: Any) -> str:
    return yaml.dump(data, Dumper=_DUMPER, **kwargs)
