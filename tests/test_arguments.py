"""The argument types the subcommands share (d5pipe.cli.arguments): the ``KEY=VALUE`` items of
``--param`` (``d5pipe history series``) and ``--env-a``/``--env-b`` (``d5pipe ab``), read by one function."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from d5pipe.cli.arguments import key_values
from d5pipe.cli.cmd_history import _params
from d5pipe.core.errors import D5PipeError


def test_items_split_at_the_first_equals_sign_and_a_later_item_wins() -> None:
    assert key_values(["a=1", "b=x=y", "c=", "a=2"], "--param") == {"a": "2", "b": "x=y", "c": ""}
    assert _params(["operators.size=16", "name=x", "on=true"]) == {"operators.size": 16, "name": "x", "on": True}


@pytest.mark.parametrize(("items", "flag", "form", "key_ok", "bad"), [
    (["a=1", "novalue"], "--param", "KEY=VALUE", bool, "--param 'novalue': expected KEY=VALUE"),
    (["=1"], "--param", "KEY=VALUE", bool, "--param '=1': expected KEY=VALUE"),
    (["OMP_NUM_THREADS=2", "1X=2"], "--env-a", "NAME=VALUE", str.isidentifier, "--env-a '1X=2': expected NAME=VALUE"),
])
def test_a_bad_item_is_a_one_line_error_naming_the_flag(items: list[str], flag: str, form: str, key_ok: Callable[[str], bool],
                                                        bad: str) -> None:
    with pytest.raises(D5PipeError) as err:
        key_values(items, flag, form, key_ok)
    assert str(err.value) == bad
