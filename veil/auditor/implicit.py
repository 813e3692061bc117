"""Implicit-privacy audit: :mod:`veil.metrics.implicit`'s detection plus its bar-chart report.

The detection itself lives in the metrics layer because the IMPOSTER publication uses it too.
"""

from __future__ import annotations

from pathlib import Path

from veil.metrics.implicit import (
    _FORMULAS,
    METRICS,
    NORMALISATIONS,
    AttributeScore,
    ImplicitReport,
    detect_implicit,
    discretise,
    normalised_mutual_information,
    one_hot_features,
)

__all__ = [
    "METRICS",
    "NORMALISATIONS",
    "AttributeScore",
    "ImplicitReport",
    "detect_implicit",
    "discretise",
    "normalised_mutual_information",
    "one_hot_features",
    "plot_report",
]


def plot_report(report: ImplicitReport, path: str | Path) -> Path:
    """Bar chart (PNG) of every attribute's NMI with θ as a line; implicit attributes highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    names = [a.name for a in report.scores]
    values = [a.nmi for a in report.scores]
    implicit = set(report.implicit)
    colors = [
        "#c0392b" if n in implicit else ("#e67e22" if a.candidate else "#7f8c8d")
        for n, a in zip(names, report.scores, strict=True)
    ]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(names) + 2), 4.0))
    ax.bar(range(len(names)), values, color=colors)
    ax.axhline(report.theta, color="black", linestyle="--", linewidth=1, label=f"θ = {report.theta:g}")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_ylabel(f"NMI ({_FORMULAS[report.normalisation].split('  ')[0]})")
    tau = "n/a" if report.tau is None else f"{report.tau:.3f}"
    ax.set_title(f"Dependence on '{report.sensitive}': {report.metric} τ = {tau} (β = {report.beta:g})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
