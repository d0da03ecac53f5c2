"""A package whose import has a visible side effect: it writes the file named by
``$D5PIPE_TEST_SIDE_EFFECT`` (tests/test_plugins.py asserts that refusing it imported nothing)."""

import os
from pathlib import Path

_marker = os.environ.get("D5PIPE_TEST_SIDE_EFFECT")
if _marker:
    Path(_marker).write_text("imported\n")
