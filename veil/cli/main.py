"""The ``veil`` command: the groups from :mod:`veil.cli._common` plus every command module."""

from __future__ import annotations

import importlib

from veil.cli._common import cli

__all__ = ["cli", "main"]

#: Command modules, one per area; each registers its commands on import.
COMMAND_MODULES: tuple[str, ...] = ("core", "query", "serve", "kanon", "sdc", "synth", "reid", "pate", "tables")

for _name in COMMAND_MODULES:
    try:
        importlib.import_module(f"veil.cli.{_name}")
    except ModuleNotFoundError as _exc:  # an area not installed in this build
        if _exc.name != f"veil.cli.{_name}":
            raise


def main() -> None:
    cli(prog_name="veil")


if __name__ == "__main__":
    main()
