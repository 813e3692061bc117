"""Shared CLI plumbing: the command groups, common options, output rendering, error mapping.

Command modules (``veil/cli/<area>.py``) import ``cli``, ``publish`` and ``audit`` from here and
register their commands; :mod:`veil.cli.main` imports every command module.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import pandas as pd

from veil._json import to_jsonable
from veil._optional import missing_extra
from veil.cli._lazy import LazyGroup
from veil.errors import InputError, MissingExtra, VeilError
from veil.policy import Policy, load_policy

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_USER",
    "audit",
    "cli",
    "comma_list",
    "emit",
    "exit_if_interrupted",
    "format_option",
    "load_policy_option",
    "output_table_options",
    "policy_option",
    "publish",
    "publish_and_report",
    "run_guarded",
    "to_jsonable",
]

EXIT_USER = 2  # bad input, refused query, exhausted budget
EXIT_INTERNAL = 3  # a bug

F = TypeVar("F", bound=Callable[..., Any])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="veil")
def cli() -> None:
    """Veil: differentially private SQL, sanitised publications and privacy audits."""


@cli.group(cls=LazyGroup, extra="curate")
def publish() -> None:
    """Curators: publish a sanitised table or model (k-anonymity, SDC, synthetic, PATE)."""


@cli.group(cls=LazyGroup, extra="audit")
def audit() -> None:
    """Security team: audit releases (re-identification, implicit privacy, k-anonymity, PATE)."""


policy_option = click.option(
    "--policy",
    "policy_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Path to the policy TOML file.",
)

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)


def output_table_options(fn: F) -> F:
    """``--output NAME`` (required) and ``--replace``: where a publication writes its table."""
    fn = click.option("--replace", is_flag=True, default=False, help="Replace --output if it exists.")(fn)
    return click.option("--output", required=True, help="Name of the published table.")(fn)


def load_policy_option(path: Path) -> Policy:
    return load_policy(path)


#: ``--seed`` on a publishing command: hidden, kept only to refuse it typed (red team s66 F1).
refused_seed_option = click.option("--seed", "seed", default=None, type=str, hidden=True, help="Refused (see docs).")


def refuse_seed(seed: str | None, command: str) -> None:
    """A ``--seed`` given to ``veil publish …`` is refused (``InputError``, exit 2) before anything is read or charged:
    a publication's noise, swaps, shuffles and samples are drawn from 256 bits of the OS CSPRNG, never from a seed an
    analyst could search (red team s66 F1: ``--seed 7``, or 31 random bits, inverted every row of a noised table)."""
    if seed is not None:
        raise InputError(
            f"{command} takes no --seed: a publication's randomness (noise, swaps, shuffles, samples) is drawn from the "
            "OS CSPRNG so that no one can reproduce it",
            hint="Drop --seed (two runs on the same data give different releases by design)",
        )


def comma_list(text: str | None) -> list[str]:
    """The non-empty, stripped items of a comma-separated option (``None`` or ``""``: none).

    >>> comma_list(" age, sex,,")
    ['age', 'sex']
    """
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def _fmt_cell(v: Any) -> str:
    v = to_jsonable(v)
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def _records(data: Any) -> tuple[list[str], list[list[Any]]]:
    if isinstance(data, pd.DataFrame):
        return [str(c) for c in data.columns], data.values.tolist()
    if isinstance(data, Mapping):
        return ["key", "value"], [[k, v] for k, v in data.items()]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        rows = list(data)
        if rows and isinstance(rows[0], Mapping):
            cols: list[str] = []
            for r in rows:
                cols.extend(k for k in r if k not in cols)
            return cols, [[r.get(c) for c in cols] for r in rows]
        return ["value"], [[r] for r in rows]
    return ["value"], [[data]]


def render_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join([line, sep, *body])


def emit(data: Any, fmt: str, *, json_data: Any = None, out: Any = None) -> None:
    """Print ``data`` (dict, list of dicts, DataFrame) as table, csv or json.

    ``json_data`` overrides what JSON output prints (for commands whose JSON shape is fixed).
    """
    stream = out or sys.stdout
    if fmt == "json":
        stream.write(json.dumps(to_jsonable(data if json_data is None else json_data), indent=2) + "\n")
        return
    cols, rows = _records(data)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        w.writerows([[_fmt_cell(v) for v in r] for r in rows])
        stream.write(buf.getvalue())
        return
    stream.write(render_table(cols, rows) + "\n")


def _as_missing_extra(exc: ModuleNotFoundError) -> MissingExtra | None:
    """An optional package missing under ``veil publish``/``veil audit`` → MissingExtra naming the group's extra."""
    found = missing_extra(exc)
    if found is None:
        return None
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        extra = getattr(ctx.command, "extra", None)
        if extra:
            return MissingExtra(found.message, extra=extra)
        ctx = ctx.parent
    return found


def publish_and_report(
    policy: Policy, kind: str, request: Mapping[str, Any], fmt: str, *, headline: Sequence[str] | None = None
) -> dict[str, Any]:
    """Run publication ``kind`` through the one publish transaction and print its summary.

    ``headline``: the keys JSON output is limited to (commands whose JSON shape is fixed). An interrupt
    that arrived while the publication was being committed exits 130 after printing it.
    """
    from veil.generators.transaction import publish as run_publish

    result = run_publish(policy, kind, request)
    summary = result.as_dict()
    emit(summary, fmt, json_data={k: summary.get(k) for k in headline} if headline else None)
    exit_if_interrupted(result.interrupted, result.release_id)
    return summary


def exit_if_interrupted(interrupted: bool, release_id: object) -> None:
    """After a publication's summary is printed: an interrupt that arrived while it was committed exits 130."""
    if interrupted:
        click.echo(f"interrupted after release {release_id} was committed (complete: table and record)", err=True)
        sys.exit(130)


def run_guarded(fn: F) -> F:
    """Decorator for command bodies: VeilError → message on stderr and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            try:
                return fn(*args, **kwargs)
            except ModuleNotFoundError as exc:
                extra = _as_missing_extra(exc)
                if extra is None:
                    raise
                raise extra from exc
        except VeilError as exc:
            click.echo(f"error [{exc.sqlstate}] {type(exc).__name__}: {exc}", err=True)
            sys.exit(EXIT_USER)
        except KeyboardInterrupt:
            click.echo("interrupted: nothing was written", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
