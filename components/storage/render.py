"""What every bucket of this stack is: private, encrypted, reachable over TLS only."""

from __future__ import annotations

import json


def public_access_block() -> dict[str, bool]:
    return {"block_public_acls": True, "block_public_policy": True, "ignore_public_acls": True,
            "restrict_public_buckets": True}


def tls_only_policy(bucket_arn: str) -> str:
    """Refuses every request that does not come over TLS, as AWS's own HyperPod buckets do."""
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }]})
