"""Whether this run must not skip what it cannot run: a full run fails instead, with the reason."""

from __future__ import annotations

import os


def required_by() -> str | None:
    """Why this run must not skip (the variable that says so), or None: in CI (CI=true, which GitHub
    Actions sets) or with ROUTING_E2E_REQUIRED=1 (./test.sh's full mode sets it)."""
    if os.environ.get("CI") == "true":
        return "CI=true"
    if os.environ.get("ROUTING_E2E_REQUIRED") == "1":
        return "ROUTING_E2E_REQUIRED=1"
    return None
