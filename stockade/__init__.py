"""Stockade: a Kubernetes policy engine that runs Kyverno policies unchanged."""

__version__ = "0.1.0"
