"""PATE from a policy table through the one publish transaction (:func:`publish_pate`).

The work is the ``pate`` plug-in's (:mod:`veil.generators.plugins.pate`: read, encode by the declared
domains, run, gate, model file and release record written together, charged to the table budget);
this module keeps the label helper it shares and a Python entry point equal to ``veil publish pate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veil.errors import InputError
from veil.generators.pate.run import PateConfig

if TYPE_CHECKING:
    from veil.generators.transaction import PublishResult

__all__ = ["publish_pate"]


def _label_classes(column: Any, label: str) -> tuple[Any, ...]:
    values = getattr(column, "values", None)
    if not values or len(values) < 2:
        raise InputError(
            f"label column {label!r} has no declared values (need at least two classes)",
            hint=f'Declare values = [...] for {label!r} in the policy, e.g. values = ["<=50K", ">50K"]',
        )
    return tuple(values)


def publish_pate(
    policy: Any,
    *,
    table: str,
    label: str,
    output_model: str | Path,
    features: Sequence[str] | None = None,
    config: PateConfig,
    student_table: str | None = None,
    validation: int = 1000,
    save_votes: str | Path | None = None,
) -> PublishResult:
    """Exactly ``veil publish pate``: train PATE from ``table``, save the student model and record the
    release, charged (ε, δ) to the table's budget — all through the publish transaction and its gate."""
    from veil.generators.transaction import publish

    request = {
        "table": table,
        "label": label,
        "features": list(features) if features is not None else None,
        "config": config,
        "student_table": student_table,
        "validation": validation,
        "save_votes": Path(save_votes) if save_votes is not None else None,
        "output_model": Path(output_model),
    }
    return publish(policy, "pate", request)
