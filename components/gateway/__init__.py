from .component import Gateway

__all__ = ["Gateway"]
