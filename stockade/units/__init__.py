"""Kubernetes quantities and Go durations: the two unit systems Kyverno policies compare and compute with."""

from stockade.units.duration import DurationError, format_duration, parse_duration
from stockade.units.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["DurationError", "Quantity", "QuantityError", "format_duration", "parse_duration", "parse_quantity"]
