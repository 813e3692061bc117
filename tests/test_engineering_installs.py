"""The light install: the proxy, the server and the CLI never import torch, scikit-learn or matplotlib;
a missing extra fails with MissingExtra naming it; every CLI command is declared to the lazy groups."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import veil.cli
from veil._optional import EXTRA_OF_PACKAGE, missing_extra, require
from veil.errors import MissingExtra

HEAVY = ("torch", "sklearn", "matplotlib", "scipy")

_PROBE = textwrap.dedent(
    """
    import json, sys
    import veil, veil.proxy, veil.proxy.session, veil.server, veil.server.app, veil.connection
    from veil.cli.main import cli
    for args in (["--help"], ["query", "--help"], ["serve", "--help"], ["explain", "--help"], ["publish", "--help"]):
        try:
            cli.main(args, prog_name="veil", standalone_mode=False)
        except SystemExit:
            pass
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})))
    """
)


@pytest.mark.slow
def test_proxy_server_and_cli_do_not_import_the_curation_stack() -> None:
    code = _PROBE.format(heavy=set(HEAVY))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"the light install path imported {loaded}"


@pytest.mark.slow
def test_the_probe_can_fail() -> None:
    """The same probe sees torch when a publication module is imported (so the check above is live)."""
    pytest.importorskip("torch")
    code = "import sys, veil.auditor.pu; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "True"


def _registered(group: click.Group, path: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {path: set(group.commands)}
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group) and name in {"publish", "audit"}:
            found.update(_registered(cmd, name))
    return found


def test_every_cli_command_is_declared_lazily() -> None:
    from veil.cli.main import LAZY_COMMANDS, cli

    modules = {
        f"veil.cli.{m.name}" for m in pkgutil.iter_modules(veil.cli.__path__) if not m.name.startswith("_") and m.name != "main"
    }
    declared = {mod for cmds in LAZY_COMMANDS.values() for mod in cmds.values()}
    assert modules == declared, "add the new module's commands to LAZY_COMMANDS in veil/cli/main.py"
    for mod in sorted(modules):
        __import__(mod)
    registered = _registered(cli, "veil")
    for group, cmds in LAZY_COMMANDS.items():
        assert registered[group] - {"publish", "audit"} == set(cmds), group


def test_require_names_the_extra() -> None:
    with pytest.raises(MissingExtra) as info:
        require("veil_no_such_package_xyz", extra="audit")
    assert info.value.extra == "audit"
    assert "pip install 'veil[audit]'" in str(info.value)
    assert info.value.sqlstate == "58000"
    assert isinstance(info.value, ImportError)


def test_require_does_not_hide_a_broken_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "veil_broken_pkg_xyz.py").write_text("import veil_missing_dependency_xyz\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        require("veil_broken_pkg_xyz", extra="curate")
    assert not isinstance(info.value, MissingExtra)


@pytest.mark.parametrize("package", sorted(EXTRA_OF_PACKAGE))
def test_missing_optional_package_maps_to_its_extra(package: str) -> None:
    err = missing_extra(ModuleNotFoundError(f"No module named {package!r}", name=f"{package}.sub"))
    assert err is not None and err.extra == EXTRA_OF_PACKAGE[package]
    assert missing_extra(ModuleNotFoundError("No module named 'x'", name="veil_unrelated_xyz")) is None


def test_cli_names_the_groups_extra_when_a_package_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`veil audit …` with torch absent: exit 2 and a message naming veil[audit] (not a traceback)."""
    from veil.cli.main import cli

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "veil.auditor.reid", raising=False)
    monkeypatch.delitem(sys.modules, "veil.auditor.pu", raising=False)
    for name in [m for m in sys.modules if m.startswith("veil.auditor.pu.")]:
        monkeypatch.delitem(sys.modules, name)
    np = pytest.importorskip("numpy")
    np.save(tmp_path / "x.npy", np.zeros((4, 2)))
    np.save(tmp_path / "m.npy", np.zeros(2))
    args = ["audit", "reid", "--data", str(tmp_path / "x.npy"), "--mean", str(tmp_path / "m.npy"), "--prior", "0.5"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "MissingExtra" in result.output and "veil[audit]" in result.output
