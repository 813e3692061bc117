"""The docs are checked against the code where they can be: policy keys, CLI options, the error table."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest

import veil.errors as errors_module
from veil.cli.main import cli
from veil.errors import PolicyError, VeilError
from veil.policy import parse_policy

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

# --------------------------------------------------------------------------- policy keys

_BASE: dict[str, Any] = {
    "database": {},
    "engine": {"kind": "duckdb"},
    "ledger": {},
    "defaults": {},
    "tables": {"t": {"privacy_unit": "row", "columns": {"a": {"type": "int", "lower": 0, "upper": 1}}}},
    "analysts": {"alice": {"epsilon": 1}},
}
#: docs/policy.md section heading → where in the parsed TOML a key of that section goes.
_SECTIONS: dict[str, tuple[str, ...]] = {
    "[database]": ("database",),
    "[engine]": ("engine",),
    "[ledger]": ("ledger",),
    "[defaults]": ("defaults",),
    "[tables.<name>]": ("tables", "t"),
    "[tables.<name>.columns]": ("tables", "t", "columns", "a"),
    "[analysts.<name>]": ("analysts", "alice"),
}


def _documented_policy_keys() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    found: dict[str, set[str]] = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading = part.splitlines()[0]
        m = re.match(r"`(\[[^\]]+\])`", heading)
        if m:
            found[m.group(1)] = set(re.findall(r"^\| `(\w+)` \|", part, flags=re.MULTILINE))
    return found


def _parsed_policy_keys(where: tuple[str, ...]) -> set[str]:
    """The keys the parser accepts at ``where``: its "Allowed keys" hint for a key no one would document."""
    data = copy.deepcopy(_BASE)
    node = data
    for step in where:
        node = node[step]
    node["zz_not_a_key_qq"] = 1
    with pytest.raises(PolicyError, match="unknown key 'zz_not_a_key_qq'") as info:
        parse_policy(data, ROOT / "policy.toml")
    hint = info.value.hint or ""
    m = re.search(r"Allowed keys: (.*)$", hint)
    if m is None:
        raise AssertionError(f"the unknown-key error at {where} lists no allowed keys: {hint!r}")
    return {k.strip() for k in m.group(1).split(",")}


def test_the_base_policy_parses() -> None:
    parse_policy(copy.deepcopy(_BASE), ROOT / "policy.toml")


def test_policy_doc_has_every_section() -> None:
    assert set(_documented_policy_keys()) == set(_SECTIONS)


@pytest.mark.parametrize("section", sorted(_SECTIONS))
def test_policy_keys_documented_are_the_keys_parsed(section: str) -> None:
    documented = _documented_policy_keys()[section]
    parsed = _parsed_policy_keys(_SECTIONS[section])
    assert documented == parsed, (
        f"docs/policy.md {section}: documented but not parsed {sorted(documented - parsed)}, "
        f"parsed but not documented {sorted(parsed - documented)}"
    )


# --------------------------------------------------------------------------- CLI options


def _command_lines(text: str) -> list[str]:
    """Every `veil …` command written in the docs: fenced blocks (with `\\` continuations) and inline code."""
    lines: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [ln.strip() for ln in joined.splitlines()]
    text_outside = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    lines += re.findall(r"`(veil [^`]+)`", text_outside)
    return [ln for ln in lines if ln.startswith("veil ")]


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    ctx = click.Context(cli)
    cmd: click.Command = cli
    rest = words
    while isinstance(cmd, click.Group) and rest:
        sub = cmd.get_command(ctx, rest[0])
        if sub is None:
            break
        cmd, rest = sub, rest[1:]
    return cmd, rest


def _doc_commands() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        for line in _command_lines(path.read_text(encoding="utf-8")):
            out.append((path.name, line))
    return out


@pytest.mark.parametrize(("doc", "line"), _doc_commands(), ids=lambda v: str(v)[:60])
def test_every_cli_option_in_the_docs_exists(doc: str, line: str) -> None:
    line = line.split(" #", 1)[0]
    try:
        words = shlex.split(line)[1:]
    except ValueError:  # an unbalanced quote in an elided example
        words = line.split()[1:]
    cmd, rest = _resolve(words)
    assert cmd is not cli or not rest or rest[0].startswith("-"), f"{doc}: unknown command in {line!r}"
    known = {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}
    used = {m.split("=")[0] for w in rest for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", w)}
    unknown = used - known
    assert not unknown, f"{doc}: `{cmd.name}` has no option(s) {sorted(unknown)} (in {line!r})"


def test_the_cli_check_can_fail() -> None:
    cmd, rest = _resolve(["query", "--no-such-option"])
    assert rest == ["--no-such-option"]
    assert cmd.name == "query"
    known = {opt for param in cmd.params for opt in param.opts}
    assert "--no-such-option" not in known and "--policy" in known


# --------------------------------------------------------------------------- error table


def _error_table() -> dict[str, str]:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    for cells in re.findall(r"^\|([^|]*)\|\s*([0-9A-Z]{5})\s*\|", text, flags=re.MULTILINE):
        for name in re.findall(r"`(\w+)`", cells[0]):
            if name[0].isupper():
                rows[name] = cells[1]
    return rows


def _error_classes() -> dict[str, type[VeilError]]:
    from veil.engines.base import EngineError

    found = {
        name: obj
        for name, obj in vars(errors_module).items()
        if isinstance(obj, type) and issubclass(obj, VeilError) and obj.__module__ == errors_module.__name__
    }
    found["EngineError"] = EngineError
    return found


def test_error_table_matches_the_error_tree() -> None:
    table, classes = _error_table(), _error_classes()
    assert set(table) == set(classes), (
        f"docs/errors.md lists unknown classes {sorted(set(table) - set(classes))} and misses {sorted(set(classes) - set(table))}"
    )
    wrong = {name: (table[name], cls.sqlstate) for name, cls in classes.items() if table[name] != cls.sqlstate}
    assert not wrong, f"SQLSTATE in docs/errors.md vs veil/errors.py: {wrong}"


# --------------------------------------------------------------------------- architecture page


def _architecture() -> str:
    return (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_architecture_walks_the_passes_in_order() -> None:
    from veil.proxy.pipeline import PASSES

    section = _architecture().split("## One query, end to end", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)
    assert documented == [name for name, _ in PASSES]


def test_architecture_layers_are_the_checked_layers() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers_contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    block = _architecture().split("## Layers", 1)[1].split("```", 2)[1]
    documented = [re.split(r"\s{3,}", line.strip())[0] for line in block.strip().splitlines()]
    assert documented == layers_contract["layers"]


def test_architecture_is_self_contained() -> None:
    assert "../" not in _architecture(), "docs/architecture.md must not defer to files outside the repository"
