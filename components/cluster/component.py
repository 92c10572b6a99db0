"""The EKS cluster (new or existing) and the Kubernetes provider every in-cluster resource uses."""

from __future__ import annotations

import functools

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components.gpu_nodes.render import NODE_POOL_LABEL
from components.iam.render import managed_policy_arn, policy, service_trust_statement
from settings import ClusterSettings

from . import render

# Policies every EKS worker node needs: join the cluster, run the VPC CNI, pull from ECR.
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")


class Network(pulumi.ComponentResource):
    """A dedicated VPC: private subnets for nodes, public ones for the NAT gateway and load balancers."""

    def __init__(self, name: str, *, cluster_name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        zones = aws.get_availability_zones_output(state="available").names
        cidrs = render.subnet_cidrs()
        self.vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=render.VPC_CIDR, enable_dns_hostnames=True,
                               enable_dns_support=True, tags={"Name": f"{cluster_name}-vpc"}, opts=child)
        gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, opts=child)
        public_routes = aws.ec2.RouteTable(f"{name}-public", vpc_id=self.vpc.id, routes=[
            aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id)], opts=child)
        self.public_subnets, self.private_subnets = [], []
        for index, cidr in enumerate(cidrs["public"]):
            subnet = aws.ec2.Subnet(f"{name}-public-{index}", vpc_id=self.vpc.id, cidr_block=cidr,
                                    availability_zone=zones[index], map_public_ip_on_launch=False,
                                    tags={"Name": f"{cluster_name}-public-{index}",
                                          **render.subnet_tags(cluster_name, public=True)}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-public-{index}", subnet_id=subnet.id,
                                          route_table_id=public_routes.id, opts=child)
            self.public_subnets.append(subnet)
        # One NAT gateway: nodes need egress to pull images and weights, not a NAT per zone.
        nat_ip = aws.ec2.Eip(f"{name}-nat", domain="vpc", opts=child)
        nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=nat_ip.id, subnet_id=self.public_subnets[0].id,
                                 opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]))
        private_routes = aws.ec2.RouteTable(f"{name}-private", vpc_id=self.vpc.id, routes=[
            aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)], opts=child)
        for index, cidr in enumerate(cidrs["private"]):
            subnet = aws.ec2.Subnet(f"{name}-private-{index}", vpc_id=self.vpc.id, cidr_block=cidr,
                                    availability_zone=zones[index],
                                    tags={"Name": f"{cluster_name}-private-{index}",
                                          **render.subnet_tags(cluster_name, public=False)}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-private-{index}", subnet_id=subnet.id,
                                          route_table_id=private_routes.id, opts=child)
            self.private_subnets.append(subnet)
        # Image layers, model weights and HyperPod's lifecycle scripts come from S3: a gateway
        # endpoint keeps that traffic off the NAT gateway (and its per-GB charge).
        aws.ec2.VpcEndpoint(f"{name}-s3", vpc_id=self.vpc.id, vpc_endpoint_type="Gateway",
                            service_name=aws.get_region_output().region.apply(render.s3_gateway_endpoint_service),
                            route_table_ids=[private_routes.id], opts=child)
        self.register_outputs({"vpcId": self.vpc.id})


class Cluster(pulumi.ComponentResource):
    """A new EKS cluster: API authentication, an OIDC provider for IRSA, no default node group,
    and, with `managed_nodes` (plain EKS), a small CPU node group for the gateway's own pods and
    the role GPU node groups join with. On HyperPod, instance groups take both jobs."""

    def __init__(self, name: str, *, settings: ClusterSettings, managed_nodes: bool, network_policy: bool,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if settings.vpc_id:
            vpc_id, private_ids, public_ids = settings.vpc_id, list(settings.private_subnet_ids), list(settings.public_subnet_ids)
        else:
            network = Network(f"{name}-network", cluster_name=settings.name, opts=child)
            vpc_id = network.vpc.id
            private_ids = [s.id for s in network.private_subnets]
            public_ids = [s.id for s in network.public_subnets]
        self.node_role, self.node_policies = (self._node_role(name) if managed_nodes else (None, []))
        self.eks = eks.Cluster(
            f"{name}-eks",
            name=settings.name,
            version=settings.version,
            vpc_id=vpc_id,
            private_subnet_ids=private_ids,
            public_subnet_ids=public_ids or None,
            # Nodes live in the private subnets only.
            node_associate_public_ip_address=False,
            authentication_mode=eks.AuthenticationMode.API,
            create_oidc_provider=True,
            skip_default_node_group=True,
            # Managed node groups and HyperPod instances both use the security group EKS creates
            # for the cluster; pulumi-eks's own groups serve only self-managed nodes.
            skip_default_security_groups=True,
            endpoint_public_access=settings.endpoint_public_access,
            endpoint_private_access=settings.endpoint_private_access,
            public_access_cidrs=list(settings.public_access_cidrs) or None,
            # pulumi-eks manages the vpc-cni EKS add-on (at EKS's default version for the cluster's
            # Kubernetes release, 1.14 or newer from 1.25 on): this turns on its network policy
            # agent, without which NetworkPolicies are accepted and never enforced.
            vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=True) if network_policy else None,
            opts=child,
        )
        # What the rest of the stack waits for before it puts pods on the cluster.
        self.ready: list[pulumi.Resource] = [self.eks]
        if managed_nodes:
            self.ready = [self._system_nodes(name, settings, private_ids)]
        self.name = pulumi.Output.from_input(settings.name)
        self.kubeconfig = pulumi.Output.secret(self.eks.kubeconfig_json)
        self.oidc_provider_arn = self.eks.oidc_provider_arn
        self.oidc_issuer_url = self.eks.oidc_provider_url
        self.security_group_id = self.eks.cluster_security_group_id
        self.subnet_ids = private_ids
        self.vpc_id = vpc_id
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, opts=child)
        self.register_outputs({"name": self.name, "kubeconfig": self.kubeconfig})

    def _node_role(self, name: str) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
        """The managed node groups' role; on HyperPod the instances use HyperPod's execution role."""
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(f"{name}-node-role", assume_role_policy=policy(service_trust_statement("ec2.amazonaws.com")),
                            opts=child)
        partition = aws.get_partition_output().partition
        # Node groups wait for these: nodes launched before the role can join fail, and on
        # delete the policies must outlive the nodes.
        policies = [
            aws.iam.RolePolicyAttachment(f"{name}-node-{policy}", role=role.name,
                                         policy_arn=partition.apply(lambda p, policy=policy: managed_policy_arn(p, policy)),
                                         opts=child)
            for policy in NODE_POLICIES]
        return role, policies

    def _system_nodes(self, name: str, settings: ClusterSettings, private_ids: list) -> eks.ManagedNodeGroup:
        return eks.ManagedNodeGroup(
            f"{name}-system-nodes",
            cluster=self.eks,
            node_role=self.node_role,
            subnet_ids=private_ids,
            instance_types=list(settings.system_nodes.instance_types),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=settings.system_nodes.size.desired, min_size=settings.system_nodes.size.min,
                max_size=settings.system_nodes.size.max),
            labels={NODE_POOL_LABEL: "system"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.node_policies),
        )


class ExistingCluster(pulumi.ComponentResource):
    """An EKS cluster this stack does not own: looked up by name, never modified."""

    def __init__(self, name: str, *, settings: ClusterSettings, opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:ExistingCluster", name, None, opts)
        found = aws.eks.get_cluster_output(name=settings.name)
        region = aws.get_region_output().region
        self.name = found.name
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(
            found.name, found.endpoint, found.certificate_authorities[0].data, region,
        ).apply(lambda args: render.exec_kubeconfig(*args)))
        self.oidc_issuer_url = found.identities[0].oidcs[0].issuer
        self._found = found
        self.node_role = None
        self.ready: list[pulumi.Resource] = [self]
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({"name": self.name, "kubeconfig": self.kubeconfig})

    @property
    def vpc_id(self) -> pulumi.Output[str]:
        return self._found.vpc_config.vpc_id

    @functools.cached_property
    def oidc_provider_arn(self) -> pulumi.Output[str]:
        # Looked up only when the add-on needs it: an existing cluster may have no IAM OIDC provider.
        return aws.iam.get_open_id_connect_provider_output(url=self.oidc_issuer_url).arn
