"""The config reference, generated from the schema: every key with its type, default, allowed
values and the docstring under its field (``docs/reference/config.md``; ``make docs`` writes it).

Nothing here lists a key by hand: :func:`schema_keys` walks :data:`d5pipe.config.schema.D5Config`
(the root, the groups and every level-owned section), descending into nested schemas, into lists of
schemas (``recipe.acceptance[].metric``) and into maps of schemas (``executor.resources.<name>.gpus``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from d5pipe.core.fields import is_schema, schema_hints

MISSING_TEXT = "???"
"""OmegaConf's MISSING: the key has no default and must be set (by the experiment file)."""


@dataclass(frozen=True)
class Key:
    """One documented config key."""

    path: str
    """Dotted key as an override names it (``[]``: each element of a list, ``<name>``: any key of a map)."""
    section: str
    """The top-level section it belongs to (``""`` for the root's own keys)."""
    type: str
    default: str
    allowed: str
    doc: str


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal written under it, for ``cls`` and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(source)
        node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
        if node is None:
            continue
        body = node.body
        for stmt, after in zip(body, body[1:] + [None]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def type_name(tp: Any) -> str:
    """``tp`` as a reader writes it: ``int``, ``float | None``, ``list[int]``, ``dict[str, Any]``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if tp is type(None):
        return "None"
    if tp is Any:
        return "Any"
    if is_schema(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


def default_text(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if value == MISSING_TEXT:
        return "required"
    return json.dumps(value, default=str)


def allowed_text(meta: typing.Mapping[str, Any]) -> str:
    """The declared constraints of a field (d5pipe.core.fields) in words."""
    parts: list[str] = []
    if "choices" in meta:
        parts.append("one of " + ", ".join(f"`{c}`" for c in meta["choices"]))
    bounds = [f"{op} {meta[k]}" for k, op in (("min", ">="), ("gt", ">"), ("max", "<="), ("lt", "<")) if k in meta]
    if bounds:
        parts.append(" and ".join(bounds))
    if "item_min" in meta:
        parts.append(f"every element >= {meta['item_min']}")
    if meta.get("neutral"):
        parts.append("left out of point IDs at its default")
    return "; ".join(parts)


def _nested(tp: Any) -> tuple[str, type] | None:
    """(path suffix, schema) for a list or map of schemas, else None."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and args and is_schema(args[0]):
        return "[]", args[0]
    if origin is dict and len(args) == 2 and is_schema(args[1]):
        return ".<name>", args[1]
    return None


def schema_keys(cls: type, prefix: str = "") -> Iterator[Key]:
    """Every key of schema ``cls`` and of the schemas below it, in declaration order."""
    hints, docs = schema_hints(cls), field_docs(cls)
    section = prefix.split(".")[0]
    for f in dataclasses.fields(cls):
        tp, path = hints[f.name], prefix + f.name
        if is_schema(tp):
            yield from schema_keys(tp, path + ".")
            continue
        yield Key(path, section, type_name(tp), default_text(f), allowed_text(f.metadata), docs.get(f.name, ""))
        nested = _nested(tp)
        if nested:
            suffix, inner = nested
            yield from schema_keys(inner, path + suffix + ".")


def _cell(text: str) -> str:
    text = " ".join(text.replace("``", "`").split())
    return text.replace("|", "\\|")


def section_docs() -> dict[str, str]:
    """Top-level section -> the docstring of its schema class."""
    from d5pipe.config.schema import D5Config

    out: dict[str, str] = {}
    hints = schema_hints(D5Config)
    for f in dataclasses.fields(D5Config):
        tp = hints[f.name]
        if is_schema(tp) and tp.__doc__ and not tp.__doc__.startswith(tp.__name__ + "("):
            out[f.name] = inspect.cleandoc(tp.__doc__)
    return out


def config_reference() -> str:
    """``docs/reference/config.md``: one table per top-level section of the schema."""
    from d5pipe.config.schema import D5Config

    keys = list(schema_keys(D5Config))
    intros = section_docs()
    lines = [
        "# Config reference",
        "",
        "<!-- Generated by `make docs` (d5pipe.config.reference) from the schema; do not edit by hand. -->",
        "",
        "Every key of d5pipe's config schema: its type, its default (the one place a default lives), the values",
        "it may take, and what it means. Set a key with a Hydra override (`d5pipe run EXP key=value`) or in an",
        "experiment file; `d5pipe plan EXP --show-config` prints the composed config. A value outside what a key",
        "allows stops `plan` and `run` with one line naming the key (exit 2). `required`: no default, the",
        "experiment sets it. `[]`: each element of a list; `<name>`: any key of a map.",
        "",
    ]
    sections: dict[str, list[Key]] = {}
    for key in keys:
        sections.setdefault(key.section, []).append(key)
    for name, members in sections.items():
        lines += [f"## {'`' + name + '`' if name else 'Root keys'}", ""]
        if name in intros:
            lines += [_cell(intros[name]), ""]
        lines += ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
        for k in members:
            lines.append(f"| `{k.path}` | `{_cell(k.type)}` | `{_cell(k.default)}` | {_cell(k.allowed)} | {_cell(k.doc)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
