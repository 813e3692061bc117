"""The ``veil`` command: the groups from :mod:`veil.cli._common`, each command imported on first use.

``LAZY_COMMANDS`` says which module registers each command. ``veil query`` and ``veil serve``
import their own module only, so the SQL proxy's CLI never loads torch, scikit-learn or matplotlib
(``pip install veil`` has none of them). A new command module must be listed here:
``tests/test_engineering_installs.py`` fails otherwise.
"""

from __future__ import annotations

from veil.cli._common import audit, cli, publish
from veil.cli._lazy import LazyGroup

__all__ = ["LAZY_COMMANDS", "cli", "main"]

#: Group → {command name: module that registers it}.
LAZY_COMMANDS: dict[str, dict[str, str]] = {
    "veil": {
        "ingest": "veil.cli.core",
        "demo": "veil.cli.core",
        "releases": "veil.cli.core",
        "tables": "veil.cli.tables",
        "retract": "veil.cli.tables",
        "move-ledger": "veil.cli.tables",
        "query": "veil.cli.query",
        "explain": "veil.cli.query",
        "budget": "veil.cli.query",
        "serve": "veil.cli.serve",
        "analyst": "veil.cli.serve",
        "compare": "veil.cli.sdc",
    },
    "publish": {
        "kanon": "veil.cli.kanon",
        "sdc": "veil.cli.sdc",
        "synth": "veil.cli.synth",
        "krr": "veil.cli.synth",
        "pate": "veil.cli.pate",
    },
    "audit": {
        "kanon": "veil.cli.kanon",
        "utility": "veil.cli.kanon",
        "implicit": "veil.cli.synth",
        "reid": "veil.cli.reid",
        "pate": "veil.cli.pate",
    },
}

for _group, _commands in (("veil", cli), ("publish", publish), ("audit", audit)):
    if not isinstance(_commands, LazyGroup):  # pragma: no cover - _common declares all three lazy
        raise TypeError(f"group {_group!r} must be a LazyGroup")
    _commands.add_lazy(LAZY_COMMANDS[_group])


def main() -> None:
    cli(prog_name="veil")


if __name__ == "__main__":
    main()
