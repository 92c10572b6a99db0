"""Plain data behind the cluster: the dedicated VPC's layout and the kubeconfig of an existing cluster."""

from __future__ import annotations

import ipaddress
import json

VPC_CIDR = "10.0.0.0/16"
# Two zones: EKS needs subnets in at least two, and one NAT gateway per zone would double its cost.
ZONE_COUNT = 2


def subnet_cidrs(vpc_cidr: str = VPC_CIDR, zones: int = ZONE_COUNT) -> dict[str, list[str]]:
    """/19 private subnets (pods take VPC addresses with the VPC CNI) and /24 public ones, per zone."""
    network = ipaddress.ip_network(vpc_cidr)
    private = [str(s) for s in list(network.subnets(new_prefix=19))[:zones]]
    public_space = list(network.subnets(new_prefix=19))[zones]
    public = [str(s) for s in list(public_space.subnets(new_prefix=24))[:zones]]
    return {"private": private, "public": public}


def s3_gateway_endpoint_service(region: str) -> str:
    return f"com.amazonaws.{region}.s3"


def subnet_tags(cluster_name: str, public: bool) -> dict[str, str]:
    # The AWS load balancer integrations find subnets by these tags.
    role = "kubernetes.io/role/elb" if public else "kubernetes.io/role/internal-elb"
    return {role: "1", f"kubernetes.io/cluster/{cluster_name}": "shared"}


def exec_kubeconfig(cluster_name: str, endpoint: str, certificate_authority: str, region: str) -> str:
    """Kubeconfig that authenticates with `aws eks get-token`, as `aws eks update-kubeconfig` writes it."""
    user = f"aws-{cluster_name}"
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": certificate_authority}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
        "users": [{"name": user, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--output", "json"],
        }}}],
    })
