"""A click group whose subcommands are imported only when they are used.

Each command module (``veil/cli/<area>.py``) registers its commands on the shared groups when it is
imported. :class:`LazyGroup` knows which module defines each command name, so ``veil query`` imports
``veil.cli.query`` alone and never the publication or audit modules (nor torch, scikit-learn or
matplotlib behind them). The name → module maps live in :mod:`veil.cli.main`;
``tests/test_engineering_installs.py`` checks they list every registered command.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

__all__ = ["LazyGroup"]


class LazyGroup(click.Group):
    """A group with ``lazy_commands``: command name → module that registers it on import.

    ``extra`` names the optional install (``veil[<extra>]``) its commands need, if any; the CLI's
    error mapping uses it to name the extra when a package is missing.
    """

    def __init__(self, *args: Any, extra: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = {}
        self.extra = extra

    def add_lazy(self, commands: Mapping[str, str]) -> None:
        """Declare ``{command name: module}`` pairs (modules are imported on first use)."""
        self.lazy_commands.update(commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy_commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            importlib.import_module(self.lazy_commands[cmd_name])
        return super().get_command(ctx, cmd_name)
