"""Command-line interface: ``stockade test``, ``stockade apply`` and friends."""
