"""d5pipe.execute.deferred_import: a stand-in that imports the real module once, on first use."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from d5pipe.execute import deferred_import as di


@pytest.fixture
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module that counts its executions (in a file) and takes a moment to import."""
    name = f"d5_deferred_{tmp_path.name.replace('-', '_')}"
    count = tmp_path / "count"
    (tmp_path / f"{name}.py").write_text(
        "import time\n"
        f"with open({str(count)!r}, 'a') as fh:\n    fh.write('x')\n"
        "time.sleep(0.2)\nVALUE = 42\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def is_deferred(name: str) -> bool:
    return isinstance(sys.modules.get(name), di._Deferred)


def executions(name: str) -> int:
    path = Path(sys.modules[name].__file__ or "").with_name("count")
    return len(path.read_text(encoding="utf-8"))


def test_first_read_imports_once_and_later_imports_get_the_real_module(slow_module: str) -> None:
    assert di.defer(slow_module, "no_such_module_d5", "os", "os.path") == [slow_module]
    assert is_deferred(slow_module)
    stand_in = __import__(slow_module)
    assert stand_in.VALUE == 42  # the read imports it
    assert not is_deferred(slow_module)
    real = __import__(slow_module)
    assert real is not stand_in and real.VALUE == 42 and stand_in.VALUE == 42
    assert executions(slow_module) == 1


def test_resolve_all_imports_every_stand_in(slow_module: str) -> None:
    di.defer(slow_module)
    di.resolve_all()
    assert not is_deferred(slow_module) and executions(slow_module) == 1


def test_concurrent_first_reads_import_once(slow_module: str) -> None:
    di.defer(slow_module)
    stand_in = __import__(slow_module)
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(stand_in.VALUE)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert got == [42] * 8
    assert executions(slow_module) == 1


def test_a_missing_attribute_still_raises(slow_module: str) -> None:
    di.defer(slow_module)
    with pytest.raises(AttributeError):
        __import__(slow_module).NOT_THERE  # noqa: B018


def test_snakemake_process_warms_up_without_pandas() -> None:
    """The warm Snakemake process imports Snakemake but not pandas (nor, for a local run, the SLURM
    plugin that would import it)."""
    code = ("import sys\nfrom d5pipe.execute import snakemake_main as m\nm.warm()\n"
            "import snakemake.scheduling.job_scheduler\n"
            "print(type(sys.modules['pandas']).__name__, 'snakemake_executor_plugin_slurm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["_Deferred", "False"]
