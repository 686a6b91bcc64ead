"""Training strategies Lightning 2.x lacks (registered in Lightning's StrategyRegistry on import)."""
