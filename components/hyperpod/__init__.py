from .component import ExistingHyperPodCluster, HyperPodCluster

__all__ = ["ExistingHyperPodCluster", "HyperPodCluster"]
