"""Markdown audit reports with plots, shared by every ``veil audit`` command.

A :class:`Report` collects headings, paragraphs, tables and matplotlib figures, then
:meth:`Report.write` writes ``report.md`` and one PNG per figure beside it
(``report_<name>.png``), linked from the Markdown. Figures are built on
:class:`matplotlib.figure.Figure` directly (no pyplot, no global state).

>>> import tempfile, pathlib
>>> r = Report("Demo audit")
>>> r.paragraph("Two runs.")
>>> r.table([{"method": "a", "accuracy": 0.91234}, {"method": "b", "accuracy": None}])
>>> r.figure("curve", line_plot({"a": ([0, 1, 2], [0.5, 0.1, 0.4])}, xlabel="step", ylabel="share"), "A curve")
>>> out = r.write(pathlib.Path(tempfile.mkdtemp()) / "audit.md")
>>> text = out.read_text()
>>> "| a | 0.912 |" in text and "![A curve](audit_curve.png)" in text and (out.parent / "audit_curve.png").exists()
True
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

__all__ = ["Report", "format_value", "line_plot", "markdown_table"]


def format_value(value: Any, floatfmt: str = ".3f") -> str:
    """One table cell: floats formatted, None/NaN as an em dash, pipes escaped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, floatfmt)
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, floatfmt: str = ".3f") -> str:
    """A GitHub-flavoured Markdown table from a list of dicts (columns: union, in first-seen order).

    >>> print(markdown_table([{"a": 1, "b": 0.5}]))
    | a | b |
    |---|---|
    | 1 | 0.500 |
    """
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(format_value(row.get(c), floatfmt) for c in columns) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def line_plot(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    hlines: Mapping[str, float] | None = None,
    ylim: tuple[float, float] | None = None,
) -> Figure:
    """One panel of named (x, y) curves, with optional labelled horizontal reference lines."""
    fig = Figure(figsize=(6.4, 3.6), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for label, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), label=label, linewidth=1.4)
    for label, y in (hlines or {}).items():
        ax.axhline(y, linestyle="--", linewidth=0.9, color="grey")
        ax.annotate(label, xy=(0.01, y), xycoords=("axes fraction", "data"), fontsize=8, color="grey", va="bottom")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    if title:
        ax.set_title(title)
    if series:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


class Report:
    """A Markdown document under construction; :meth:`write` puts it on disk atomically."""

    def __init__(self, title: str) -> None:
        self.title = title
        self._blocks: list[str | tuple[str, Figure, str]] = []

    def heading(self, text: str, level: int = 2) -> None:
        self._blocks.append("#" * max(2, min(level, 6)) + " " + text)

    def paragraph(self, text: str) -> None:
        self._blocks.append(text.strip())

    def bullets(self, items: Sequence[str]) -> None:
        self._blocks.append("\n".join(f"- {item}" for item in items))

    def table(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, floatfmt: str = ".3f") -> None:
        self._blocks.append(markdown_table(rows, columns, floatfmt) if rows else "_(no rows)_")

    def key_values(self, values: Mapping[str, Any]) -> None:
        self.table([{"item": k, "value": v} for k, v in values.items()], ["item", "value"])

    def figure(self, name: str, fig: Figure, caption: str) -> None:
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"figure name {name!r} must be letters, digits, '-' or '_'")
        self._blocks.append((name, fig, caption))

    def render(self, stem: str) -> str:
        """The Markdown text; figures are referenced as ``<stem>_<name>.png``."""
        parts = [f"# {self.title}"]
        for block in self._blocks:
            if isinstance(block, tuple):
                name, _fig, caption = block
                parts.append(f"![{caption}]({stem}_{name}.png)\n\n*{caption}*")
            else:
                parts.append(block)
        return "\n\n".join(parts) + "\n"

    def write(self, path: str | Path) -> Path:
        """Write the Markdown and its PNGs; the .md is replaced atomically (no half-written file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        for block in self._blocks:
            if isinstance(block, tuple):
                name, fig, _ = block
                fig.savefig(path.parent / f"{path.stem}_{name}.png")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.render(path.stem))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path
