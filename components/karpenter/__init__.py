from .component import HyperPodNodePool, Karpenter

__all__ = ["HyperPodNodePool", "Karpenter"]
