"""Curator B's side of PATE: feature encoding over declared domains and local-DP privatisation.

Every feature is mapped into ``[0, 1]`` by its declared bounds (numbers) or one-hot over its declared
values (categories); :func:`privatise_records` adds ``Lap(1/ρ)`` per coordinate (local DP per record,
:func:`ldp_guarantee` states it). See :mod:`veil.generators.pate` for the whole protocol.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from veil._json import to_jsonable
from veil.errors import InputError
from veil.mechanisms import laplace

LdpEncoding = Literal["box", "l1"]


@dataclass(frozen=True)
class FeatureSpec:
    """One input feature and its public (declared) domain."""

    name: str
    kind: Literal["numeric", "category"]
    lower: float | None = None
    upper: float | None = None
    values: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind == "numeric":
            if (
                self.lower is None
                or self.upper is None
                or not (math.isfinite(self.lower) and math.isfinite(self.upper) and self.lower < self.upper)
            ):
                raise InputError(
                    f"feature {self.name!r} needs finite declared bounds lower < upper, got {self.lower!r}, {self.upper!r}",
                    hint="Declare lower and upper for the column in the policy",
                )
        elif self.kind == "category":
            if not self.values:
                raise InputError(
                    f"categorical feature {self.name!r} has no declared values",
                    hint="Declare values = [...] for the column in the policy",
                )
        else:
            raise InputError(f"feature kind must be 'numeric' or 'category', got {self.kind!r}")

    @property
    def width(self) -> int:
        return 1 if self.kind == "numeric" else len(self.values or ())

    @property
    def l1_diameter(self) -> int:
        """Largest L1 distance between two encodings of this feature (1 numeric, 2 one-hot)."""
        return 1 if self.kind == "numeric" else 2


@dataclass(frozen=True)
class FeatureEncoder:
    """Maps records to ``[0, 1]^width`` using declared bounds only (never the data's own range)."""

    features: tuple[FeatureSpec, ...]

    def __post_init__(self) -> None:
        if not self.features:
            raise InputError("no features to encode", hint="Pass at least one feature column")
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise InputError(f"duplicate feature names: {names}")

    @classmethod
    def numeric_box(cls, names: Sequence[str], lower: float, upper: float) -> FeatureEncoder:
        """All features numeric with the same declared bounds (e.g. pixels in [0, 1])."""
        return cls(tuple(FeatureSpec(str(n), "numeric", float(lower), float(upper)) for n in names))

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any], names: Sequence[str]) -> FeatureEncoder:
        """Build from policy ``ColumnSpec``s: bounded int/float → numeric, else declared values → one-hot."""
        specs = []
        for name in names:
            col = columns[name]
            if getattr(col, "type", None) in ("int", "float") and col.lower is not None and col.upper is not None:
                if float(col.lower) == float(col.upper):
                    raise InputError(f"column {name!r} has lower == upper == {col.lower}", hint="Drop the constant column")
                specs.append(FeatureSpec(name, "numeric", float(col.lower), float(col.upper)))
            elif getattr(col, "values", None):
                specs.append(FeatureSpec(name, "category", values=tuple(col.values)))
            else:
                raise InputError(
                    f"column {name!r} has neither declared bounds nor declared values",
                    hint="PATE encodes features from the policy's public domain: declare lower/upper or values",
                )
        return cls(tuple(specs))

    @property
    def width(self) -> int:
        return sum(f.width for f in self.features)

    @property
    def l1_diameter(self) -> int:
        """``Δ = n_numeric + 2·n_categorical``: L1 diameter of the encoded record space."""
        return sum(f.l1_diameter for f in self.features)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    def domain_records(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` encoded records drawn from the declared domain alone (numbers uniform in ``[0, 1]``, one declared
        category per block): data-independent fillers, encodings of real records as :meth:`transform` makes them.

        >>> FeatureEncoder.numeric_box(["a", "b"], 0, 10).domain_records(3, np.random.default_rng(0)).shape
        (3, 2)
        """
        blocks = []
        for f in self.features:
            if f.kind == "numeric":
                blocks.append(rng.random((n, 1)))
            else:
                onehot = np.zeros((n, f.width))
                onehot[np.arange(n), rng.integers(0, f.width, size=n)] = 1.0
                blocks.append(onehot)
        return np.hstack(blocks).astype(np.float64)

    def transform(self, data: pd.DataFrame | np.ndarray) -> np.ndarray:
        """Encode a DataFrame (by column name) or a 2-D array (numeric features, in order).

        Numbers are clipped into their declared range; a missing number encodes as 0.5; a missing or
        undeclared category encodes as an all-zero block. Output is float64 in ``[0, 1]``.
        """
        if isinstance(data, np.ndarray):
            if data.ndim != 2 or data.shape[1] != len(self.features):
                raise InputError(f"array of shape {data.shape} for {len(self.features)} features")
            if any(f.kind != "numeric" for f in self.features):
                raise InputError("arrays can only be encoded for numeric features", hint="Pass a DataFrame")
            frame = pd.DataFrame(data, columns=list(self.names))
        else:
            missing = [n for n in self.names if n not in data.columns]
            if missing:
                raise InputError(f"columns {missing} are missing from the data", hint=f"Available: {list(data.columns)}")
            frame = data
        blocks = []
        for f in self.features:
            col = frame[f.name]
            if f.kind == "numeric":
                v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
                lo, hi = float(f.lower), float(f.upper)  # type: ignore[arg-type]
                z = np.clip((v - lo) / (hi - lo), 0.0, 1.0)
                blocks.append(np.where(np.isnan(z), 0.5, z)[:, None])
            else:
                vals = list(f.values or ())
                index = {v: i for i, v in enumerate(vals)}
                codes = np.array([index.get(v, -1) if not _isna(v) else -1 for v in col.tolist()], dtype=np.int64)
                onehot = np.zeros((len(codes), len(vals)))
                ok = codes >= 0
                onehot[np.flatnonzero(ok), codes[ok]] = 1.0
                blocks.append(onehot)
        return np.hstack(blocks).astype(np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"features": [to_jsonable(asdict(f)) for f in self.features]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureEncoder:
        return cls(
            tuple(
                FeatureSpec(
                    f["name"],
                    f["kind"],
                    f.get("lower"),
                    f.get("upper"),
                    tuple(f["values"]) if f.get("values") is not None else None,
                )
                for f in data["features"]
            )
        )


def _isna(v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- curator B: local DP


def ldp_guarantee(encoder: FeatureEncoder, rho: float | None, encoding: LdpEncoding = "box") -> dict[str, Any]:
    """The local-DP ε that curator B's noise gives each student record (None: no noise, no guarantee).

    >>> enc = FeatureEncoder((FeatureSpec("age", "numeric", 17, 90), FeatureSpec("sex", "category", values=("F", "M"))))
    >>> ldp_guarantee(enc, 0.5)
    {'rho': 0.5, 'encoding': 'box', 'per_numeric_feature': 0.5, 'per_categorical_feature': 1.0, 'per_record': 1.5}
    """
    if rho is None:
        return {
            "rho": None,
            "encoding": encoding,
            "per_numeric_feature": None,
            "per_categorical_feature": None,
            "per_record": None,
        }
    r = check_rho(rho)
    if encoding == "box":
        return {
            "rho": r,
            "encoding": "box",
            "per_numeric_feature": r,
            "per_categorical_feature": 2 * r,
            "per_record": r * encoder.l1_diameter,
        }
    if encoding == "l1":
        return {"rho": r, "encoding": "l1", "per_numeric_feature": 2 * r, "per_categorical_feature": 2 * r, "per_record": 2 * r}
    raise InputError(f"encoding must be 'box' or 'l1', got {encoding!r}")


def check_rho(rho: float) -> float:
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not math.isfinite(rho) or rho <= 0:
        raise InputError(f"student rho must be a finite number > 0, got {rho!r}", hint="Pass e.g. 0.5, or no noise")
    return float(rho)


def privatise_records(
    X: np.ndarray, *, rho: float | None, encoding: LdpEncoding = "box", rng: np.random.Generator | None = None
) -> np.ndarray:
    """Curator B: add ``Lap(1/ρ)`` to every coordinate of box-encoded records (``rho=None``: unchanged).

    ``X`` must already be encoded into ``[0, 1]`` (see :class:`FeatureEncoder`).
    """
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise InputError(f"records must be a 2-D array, got shape {arr.shape}")
    if np.any(arr < 0) or np.any(arr > 1):
        raise InputError("records must be encoded into [0, 1] before privatisation", hint="Use FeatureEncoder.transform")
    if encoding == "l1":
        norms = arr.sum(axis=1, keepdims=True)
        arr = np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)
    elif encoding != "box":
        raise InputError(f"encoding must be 'box' or 'l1', got {encoding!r}")
    if rho is None:
        return arr.copy()
    return laplace(arr, scale=1.0 / check_rho(rho), rng=rng)
