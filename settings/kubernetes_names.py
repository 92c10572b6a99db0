"""Kubernetes object names as the API server checks them, for every key that names one."""

from __future__ import annotations

import re

# RFC 1123 subdomain: dot-separated labels, each starting and ending with a letter or digit.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_SUBDOMAIN = 253


def subdomain_message(value: str, what: str = "a Kubernetes object name") -> str | None:
    if len(value) > MAX_SUBDOMAIN or not DNS_SUBDOMAIN.match(value):
        return (f"must be {what}: lower-case letters, digits, '-' and '.', each part between dots starting and "
                f"ending with a letter or digit, at most {MAX_SUBDOMAIN} characters.")
    return None
