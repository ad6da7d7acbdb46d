"""kai-py: a KAI-compatible batch and GPU scheduler for Kubernetes, in Python."""

__version__ = "0.1.0"
