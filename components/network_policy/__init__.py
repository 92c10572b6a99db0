from .component import FrontDoorPolicies

__all__ = ["FrontDoorPolicies"]
