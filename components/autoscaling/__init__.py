from .component import Autoscaling

__all__ = ["Autoscaling"]
