from .fused_adam import FusedAdamBuilder

__all__ = ["FusedAdamBuilder"]
