from .component import InferenceAddon

__all__ = ["InferenceAddon"]
