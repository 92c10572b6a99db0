from .component import GpuNodes

__all__ = ["GpuNodes"]
