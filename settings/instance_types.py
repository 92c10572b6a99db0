"""Instance types as AWS's own APIs list them, in the service models botocore ships: EC2's
`InstanceType` for the managed node groups on `eks`, CreateCluster's for HyperPod's groups
(settings/sagemaker_limits.py). Raising the botocore pin (requirements.txt) brings AWS's newer types.

A model is read from botocore's installed data only (no network, no AWS credentials, and no
~/.aws/models, which could make one machine check other types than another), on first use rather
than at import: `python -m routing` commands that never parse such a stack should not pay for it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from .reader import did_you_mean

# GPUs per instance for common GPU instance types, to warn when the node group cannot hold
# the replicas asked for. Unknown types are not checked.
GPUS_PER_INSTANCE = {
    "g4dn.xlarge": 1, "g4dn.2xlarge": 1, "g4dn.4xlarge": 1, "g4dn.8xlarge": 1, "g4dn.12xlarge": 4, "g4dn.16xlarge": 1,
    "g5.xlarge": 1, "g5.2xlarge": 1, "g5.4xlarge": 1, "g5.8xlarge": 1, "g5.16xlarge": 1, "g5.12xlarge": 4,
    "g5.24xlarge": 4, "g5.48xlarge": 8, "g6.xlarge": 1, "g6.2xlarge": 1, "g6.4xlarge": 1, "g6.8xlarge": 1,
    "g6.16xlarge": 1, "g6.12xlarge": 4, "g6.24xlarge": 4, "g6.48xlarge": 8, "g6e.xlarge": 1, "g6e.2xlarge": 1,
    "g6e.12xlarge": 4, "g6e.48xlarge": 8, "p4d.24xlarge": 8, "p5.48xlarge": 8,
}

# A family list longer than this (EC2 has some 200 families) is no help to read; the suggestion is.
MAX_FAMILIES_LISTED = 60


@functools.cache
def service_shapes(service: str) -> Mapping[str, Any]:
    """The shapes of an AWS service's API model (`service-2`) at the installed botocore."""
    from botocore.loaders import Loader

    loader = Loader(extra_search_paths=[Loader.BUILTIN_DATA_PATH], include_default_search_paths=False)
    return loader.load_service_model(service, "service-2")["shapes"]


def botocore_version() -> str:
    import botocore

    return botocore.__version__


@functools.cache
def ec2_instance_types() -> frozenset[str]:
    return frozenset(service_shapes("ec2")["InstanceType"]["enum"])


def unknown_type_message(value: str, known: Iterable[str], what: str, model: str) -> str:
    """Why `value` is refused, as one line: what its family comes in (or which families there are),
    the nearest type, and where the list comes from."""
    known = sorted(known)
    family = value.rpartition(".")[0]
    sizes = sorted((t for t in known if t.rpartition(".")[0] == family), key=_by_size)
    families = sorted({t.rpartition(".")[0] for t in known})
    if sizes:
        offered = f": {family} comes in {', '.join(sizes)}."
    elif len(families) <= MAX_FAMILIES_LISTED:
        offered = f": its families are {', '.join(families)}."
    else:
        offered = "."
    return (f"is not {what}{offered}{did_you_mean(value, known)} (These are the types botocore "
            f"{botocore_version()}'s {model} model lists; for one AWS added since, raise the botocore pin in "
            "requirements.txt.)")


def ec2_instance_type_message(value: str) -> str | None:
    known = ec2_instance_types()
    if value in known:
        return None
    if value.startswith("ml.") and value[len("ml."):] in known:
        return (f"is a SageMaker instance type; platform eks runs EC2 managed node groups, which take EC2 types, "
                f"e.g. {value[len('ml.'):]}.")
    return unknown_type_message(value, known, "an EC2 instance type", "EC2")


def _by_size(instance_type: str) -> tuple[int, str]:
    """Smallest first: nano to large, xlarge, 2xlarge and up, then the bare-metal sizes."""
    size = instance_type.rpartition(".")[2]
    multiple = size.partition("x")[0]
    if multiple.isdigit():
        return int(multiple), instance_type
    named = {"nano": -4, "micro": -3, "small": -2, "medium": -1, "large": 0, "xlarge": 1}
    return named.get(size, 10**6), instance_type
