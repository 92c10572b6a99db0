"""The project's config exactly as the running program receives it."""

from __future__ import annotations

import json
import os
from typing import Any

from pulumi.runtime import config as runtime_config

# The language host hands the program the stack's whole config and the secret keys in these
# variables. Reading them all (not key by key) lets a misspelled key be reported, not ignored.
CONFIG_ENV = "PULUMI_CONFIG"
SECRET_KEYS_ENV = "PULUMI_CONFIG_SECRET_KEYS"


def project_config(namespace: str) -> tuple[dict[str, Any], frozenset[str]]:
    """This project's keys (namespace stripped) and which of them are secrets."""
    # Config set in-process (the SDK's mocks, the Automation API) overrides the environment.
    # CONFIG is the SDK's own store behind pulumi.Config; the pinned SDK version keeps it stable.
    config = {**json.loads(os.environ.get(CONFIG_ENV) or "{}"), **runtime_config.CONFIG.get()}
    secret_keys = set(json.loads(os.environ.get(SECRET_KEYS_ENV) or "[]"))
    prefix = namespace + ":"
    raw = {key[len(prefix):]: value for key, value in config.items() if key.startswith(prefix)}
    secrets = frozenset(key[len(prefix):] for key in config
                        if key.startswith(prefix) and (key in secret_keys or runtime_config.is_config_secret(key)))
    return raw, secrets
