"""The user-error type: one line naming the key, file or value to fix, and its exit code."""

from __future__ import annotations

import errno
import os


class D5PipeError(Exception):
    """A user error: bad config, bad input, missing file.

    The CLI prints ``str(err)`` as one line (no traceback) and exits with ``exit_code`` (2).
    Messages name the key, file or value to fix.
    """

    exit_code = 2

    def __str__(self) -> str:
        return " ".join(super().__str__().split())


class WorkflowFailed(D5PipeError):
    """The workflow engine itself failed (points' own failures never cause this)."""

    exit_code = 1


DISK_FULL_EXIT = 75
"""EX_TEMPFAIL: try again later (once space exists) -- the same command resumes."""


class DiskFull(D5PipeError):
    """A write found no space (ENOSPC, EDQUOT): one line naming the path and the free space there;
    exit 75. The writer left the old file or none (d5pipe.core.atomic), so re-running resumes."""

    exit_code = DISK_FULL_EXIT

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> DiskFull:
        """Naming ``path`` absolute: a job writes relative to the run directory, its cwd."""
        path = os.path.abspath(os.fspath(path))
        return cls(f"no space left to write {path} ({_free_text(path)}); free some space and re-run the "
                   "same command to resume (nothing finished is lost)")


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or while handling, outermost first, each once."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` is a full filesystem or an exhausted quota."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def _free_text(path: str | os.PathLike[str]) -> str:
    """``"12.0 KiB free on /mnt"``: the free space of the filesystem ``path`` is on (its nearest
    existing ancestor), for a user without root (``f_bavail``)."""
    p = os.path.abspath(os.fspath(path))
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    try:
        st = os.statvfs(p)
    except OSError:
        return "free space unknown"
    free = float(st.f_bavail * st.f_frsize)
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if free < 1024 or unit == "TiB":
            break
        free /= 1024
    return f"{free:.0f} B free" if unit == "B" else f"{free:.1f} {unit} free"
