"""d5pipe: fair, verifiable, reproducible deep-learning benchmarks on clusters."""

__version__ = "0.1.0"
