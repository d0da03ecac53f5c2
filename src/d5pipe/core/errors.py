"""The user-error type: one line naming the key, file or value to fix, and its exit code."""

from __future__ import annotations


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
