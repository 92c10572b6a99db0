from .component import LlmdRouter

__all__ = ["LlmdRouter"]
