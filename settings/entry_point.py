"""How every `python -m` command of the project ends: with main's status, and quietly when the
reader of its output goes away first (`python -m dryrun --stack eks --json | head -c 400`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn

# 128 + SIGPIPE: the status a shell shows for a command whose reader went away (`yes | head`).
BROKEN_PIPE_STATUS = 141


def exit_with(main: Callable[[], int]) -> NoReturn:
    """sys.exit(main()); on a broken pipe, no traceback: what is left to print goes to /dev/null
    (Python's own advice, docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        status = main()
        # Flushed here: a broken pipe found by the flush at exit would print "Exception ignored".
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = BROKEN_PIPE_STATUS
    sys.exit(status)
