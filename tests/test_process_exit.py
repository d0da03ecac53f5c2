"""d5pipe.measure.process.exit_now and forget_exit_handlers: a process that skips the interpreter's
teardown still runs the exit handlers registered in it (libraries delete there what they made), and a
forked child runs its own, never its parent's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = """
import atexit, os, sys
from pathlib import Path
from d5pipe.measure.process import exit_now, forget_exit_handlers
out = Path(sys.argv[1])
atexit.register(lambda: (out / f"parent-handler-in-{os.getpid()}").touch())
pid = os.fork()
if pid == 0:
    forget_exit_handlers()
    atexit.register(lambda: (out / "child-handler").touch())
    atexit.register(lambda: 1 / 0)  # an error in one handler: printed, the others still run
    print("child", flush=True)
    exit_now(3)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
(out / "parent-pid").write_text(str(os.getpid()))
exit_now(0)
"""


def test_exit_now_runs_this_processs_exit_handlers_and_a_fork_forgets_its_parents(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CODE, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["child", "child exit 3"]  # the child's stream was flushed
    assert "ZeroDivisionError" in out.stderr
    parent = (tmp_path / "parent-pid").read_text()
    made = sorted(p.name for p in tmp_path.iterdir() if p.name != "parent-pid")
    assert made == ["child-handler", f"parent-handler-in-{parent}"]  # the parent's handler ran in the parent only
