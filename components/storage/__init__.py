from .component import PrivateBucket

__all__ = ["PrivateBucket"]
