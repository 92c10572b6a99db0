from .component import GatewayApiDataPlane

__all__ = ["GatewayApiDataPlane"]
