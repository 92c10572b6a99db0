from .component import ModelNamespace, ModelServer

__all__ = ["ModelNamespace", "ModelServer"]
