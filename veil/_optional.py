"""Optional dependencies: which extra brings which package, and a typed error when one is missing.

``pip install veil`` is the SQL proxy, the server and the CLI. Publications need ``veil[curate]``,
audits ``veil[audit]``, the Spark engine ``veil[spark]``. Code that needs one of these packages
either imports it through :func:`require`, or lets the CLI turn the ``ModuleNotFoundError`` into
:class:`~veil.errors.MissingExtra` with :func:`missing_extra`.

>>> require("json", extra="curate").__name__
'json'
>>> try:
...     require("veil_no_such_package", extra="curate")
... except MissingExtra as exc:
...     (exc.sqlstate, exc.extra)
('58000', 'curate')
"""

from __future__ import annotations

import importlib
from types import ModuleType

from veil.errors import MissingExtra

__all__ = ["EXTRA_OF_PACKAGE", "missing_extra", "require"]

#: Top-level import name → the extra that installs it (pyproject.toml ``[project.optional-dependencies]``).
EXTRA_OF_PACKAGE: dict[str, str] = {
    "torch": "curate",
    "sklearn": "curate",
    "scipy": "curate",
    "matplotlib": "curate",
    "threadpoolctl": "curate",
    "pyspark": "spark",
}


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming ``extra``.

    A ``ModuleNotFoundError`` for another package (a broken install of the module itself) is not
    hidden: it propagates unchanged.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtra(f"this needs the Python package {module!r}, which is not installed", extra=extra) from exc


def missing_extra(exc: ModuleNotFoundError) -> MissingExtra | None:
    """The :class:`MissingExtra` for a failed import of an optional package, or None for any other module."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_PACKAGE.get(top)
    if extra is None:
        return None
    return MissingExtra(f"this needs the Python package {top!r}, which is not installed", extra=extra)
