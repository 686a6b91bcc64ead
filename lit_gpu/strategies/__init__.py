"""Training strategies Lightning 2.x lacks (registered in Lightning's StrategyRegistry on import)."""

from lit_gpu.strategies.dp import DataParallelStrategy, register

register()

__all__ = ["DataParallelStrategy"]
