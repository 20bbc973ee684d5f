"""Kyverno CLI test files (``kyverno-test.yaml``): loading, running and judging them."""
