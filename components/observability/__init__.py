from .component import Observability

__all__ = ["Observability"]
