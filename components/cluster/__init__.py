from .component import Cluster, ExistingCluster, Network

__all__ = ["Cluster", "ExistingCluster", "Network"]
