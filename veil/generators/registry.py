"""The publication plug-in registry: every kind (kanon, sdc, synth, krr, pate) registers here.

The registry imports none of the plug-ins: it loads the modules named in :data:`PLUGIN_MODULES`
(each registers its class with :func:`register_plugin` on import). ``veil publish <kind>`` and
``veil compare`` go through :func:`get_plugin` and the one transaction in
:mod:`veil.generators.transaction`, so built-in and added kinds are treated alike.

A plug-in implements two steps, and may add a third between them:

* :meth:`PublishPlugin.plan` — validate the request and say what will be read and written and
  what it costs (:class:`~veil.generators.publication.Plan`); reads no data. Every refusal that
  follows from the parameters and the policy alone belongs here.
* :meth:`PublishPlugin.check_source` (optional) — refusals that follow from the source's schema
  (column names and types) or size, run after the read and *before* the DP cost is reserved, so a
  refused publication costs nothing (red team s24, A10).
* :meth:`PublishPlugin.sanitise` — turn the source rows into a
  :class:`~veil.generators.publication.Publication` (table or model, with each column's protection).

>>> sorted(plugin_names())
['kanon', 'krr', 'pate', 'sdc', 'synth']
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import pandas as pd

from veil.errors import InputError, did_you_mean
from veil.generators.publication import Plan, Publication

__all__ = [
    "PLUGIN_MODULES",
    "PublishPlugin",
    "RunEnv",
    "get_plugin",
    "plugin_names",
    "register_plugin",
]

#: Modules holding the built-in publication kinds; importing one registers its plug-in.
PLUGIN_MODULES: tuple[str, ...] = (
    "veil.generators.plugins.kanon",
    "veil.generators.plugins.sdc",
    "veil.generators.plugins.synth",
    "veil.generators.plugins.krr",
    "veil.generators.plugins.pate",
)


@dataclass(frozen=True)
class RunEnv:
    """What the transaction gives ``sanitise`` besides the rows: the policy, the source table's
    spec (or None), a generator seeded with 256 bits of the OS CSPRNG for non-DP randomness (every draw of the
    release that is not DP noise: :mod:`veil.generators.randomness`), the test-only DP ``rng`` (None: OpenDP's
    CSPRNG), whether to show progress, the request's seed (if any: curator-only metrics at most, never a draw of the
    release, red team s66 F1) and the number of rows of the whole source table."""

    policy: Any
    spec: Any
    generator: np.random.Generator
    rng: np.random.Generator | None = None
    progress: bool = True
    seed: int | None = None
    source_rows: int = 0  # rows of the source table (training + holdout)


class PublishPlugin(ABC):
    """One publication kind. Subclass, set ``kind``/``summary``, implement both steps, register."""

    kind: ClassVar[str]
    summary: ClassVar[str] = ""
    artifact: ClassVar[str] = "table"

    @abstractmethod
    def plan(self, policy: Any, request: Mapping[str, Any]) -> Plan:
        """Check ``request`` (the command's options) and return the plan; reads no data."""

    def check_source(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> None:
        """Refuse, before anything is charged, what the source's schema or size rules out (default: nothing).

        Runs after the read and before the reservation: it may look at column names, dtypes and the
        number of usable rows, never at values beyond that (the actor is the curator, who reads the
        table anyway). ``sanitise``'s own refusals come after the charge."""
        return None

    @abstractmethod
    def sanitise(self, plan: Plan, data: pd.DataFrame, env: RunEnv) -> Publication:
        """Produce the publication from the training rows ``data`` (holdout rows already removed)."""

    #: The parameter ``veil compare`` sweeps for this kind, and its default values.
    sweep_param: ClassVar[str] = ""
    sweep_values: ClassVar[tuple[Any, ...]] = ()

    def sweep(self, request: Mapping[str, Any], values: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """The requests ``veil compare`` evaluates: ``request`` with :attr:`sweep_param` set to each value."""
        if not self.sweep_param:
            return [dict(request)]
        return [{**request, self.sweep_param: v} for v in (values or self.sweep_values)]

    def summary_of(self, plan: Plan, publication: Publication) -> dict[str, Any]:
        """Extra fields for the command's summary (default: the publication's ``extra``)."""
        return dict(publication.extra)


P = TypeVar("P", bound=type[PublishPlugin])
_PLUGINS: dict[str, type[PublishPlugin]] = {}
_loaded = False


def register_plugin(cls: P) -> P:
    """Class decorator: make ``cls`` the plug-in of ``cls.kind``."""
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"{cls.__name__} needs a non-empty class attribute 'kind'")
    if kind in _PLUGINS and _PLUGINS[kind] is not cls:
        raise ValueError(f"a publication plug-in for {kind!r} is already registered ({_PLUGINS[kind].__qualname__})")
    _PLUGINS[kind] = cls
    return cls


def _load() -> None:
    global _loaded
    if not _loaded:
        for name in PLUGIN_MODULES:
            importlib.import_module(name)
        _loaded = True


def plugin_names() -> list[str]:
    """Registered publication kinds, sorted."""
    _load()
    return sorted(_PLUGINS)


def get_plugin(kind: str) -> PublishPlugin:
    """A fresh instance of the plug-in for ``kind``; unknown kinds get a suggestion."""
    _load()
    try:
        return _PLUGINS[kind]()
    except KeyError:
        raise InputError(
            f"unknown publication kind {kind!r} (known: {', '.join(sorted(_PLUGINS))})",
            hint=did_you_mean(kind, _PLUGINS),
        ) from None
