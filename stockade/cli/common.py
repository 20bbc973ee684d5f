"""What every command shares: one error style (``Error: <message>`` on stderr), and the ``-`` (standard input) rule."""

from __future__ import annotations

from collections.abc import Iterable

import click

from stockade.errors import StockadeError
from stockade.policy.loader import STDIN_PATH

USAGE_EXIT = 2  # usage and input errors, as click exits for a usage error
FAILURE_EXIT = 1  # the command ran and something failed (a denied request, a failed check, an unreachable server)


class CliInputError(StockadeError, click.ClickException):
    """An input the command cannot use (a bad file, conflicting arguments): ``Error: <message>``, exit status 2."""

    exit_code = USAGE_EXIT


def print_error(message: str) -> None:
    """The one error line style of every command (the one click prints for its own errors)."""
    click.echo(f"Error: {message}", err=True)


def check_stdin_use(inputs: dict[str, Iterable[str | None]]) -> None:
    """Standard input can be read once: refuse ``-`` given for more than one input (or twice for one).

    ``inputs`` maps the option names shown in the message to the paths given for them.
    """
    dashed = [name for name, paths in inputs.items() for path in paths if path == STDIN_PATH]
    if len(dashed) > 1:
        raise CliInputError(f"only one input can be read from standard input ('-'), got it for {', '.join(dashed)}")
