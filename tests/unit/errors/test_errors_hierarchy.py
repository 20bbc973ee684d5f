"""Every exception class stockade defines derives from StockadeError, so callers can rely on one typed root."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import stockade
from stockade.errors import StockadeError


def _stockade_exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for module_info in pkgutil.walk_packages(stockade.__path__, prefix="stockade."):
        if module_info.name.endswith(".__main__"):
            continue  # importing it runs the CLI
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found.append(value)
    return found


def test_every_stockade_exception_derives_from_the_base() -> None:
    classes = _stockade_exception_classes()
    assert len(classes) > 60  # the walk really imported the packages
    strays = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in classes if not issubclass(cls, StockadeError))
    assert strays == []


def test_the_base_carries_where_and_why() -> None:
    error = StockadeError("bad")
    assert (error.file, error.field, error.reason) == (None, None, None)
