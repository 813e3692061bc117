"""Taxonomy trees (generalisation hierarchies) read from ARX-format files.

An ARX hierarchy file has one leaf per line followed by its ancestors up to the root,
``;``-separated, e.g. ``Private;Non-Government;*``. A categorical quasi-identifier with no
file gets a *flat* tree (every leaf directly under ``*``).

Leaves are numbered in depth-first order, so every node covers a contiguous range of leaf
codes and the lowest common ancestor (LCA) of any set of leaves is the LCA of its smallest
and largest code. The k-anonymity generators rely on this: a generalised categorical value
is then just an interval of leaf codes, like a numeric one.

>>> h = Hierarchy.from_paths([["Private"], ["Self-emp", "Self"], ["Self-inc", "Self"]])
>>> h.leaves
('Private', 'Self-emp', 'Self-inc')
>>> h.label(1, 2), h.label(0, 2), h.leaf_count(h.label(1, 2))
('Self', '*', 2)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from veil.errors import InputError, did_you_mean

__all__ = ["ROOT", "Hierarchy", "find_hierarchy_files", "load_hierarchies", "load_hierarchy"]

#: Label of the root of every hierarchy (ARX convention).
ROOT = "*"


@dataclass(frozen=True)
class Hierarchy:
    """A taxonomy tree with leaves in depth-first order.

    ``nodes[0]`` is the root; ``parent[i]`` is the parent node index (-1 for the root);
    ``span[i] = (first, last)`` is the inclusive range of leaf codes under node ``i``.
    """

    leaves: tuple[str, ...]
    nodes: tuple[str, ...]
    parent: tuple[int, ...]
    span: tuple[tuple[int, int], ...]
    source: str = "flat"
    _lca: np.ndarray = field(repr=False, compare=False, default=None)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_paths(cls, paths: Iterable[Sequence[str]], *, source: str = "flat") -> Hierarchy:
        """Build from leaf-to-root paths *without* the root (``["Private", "Non-Government"]``)."""
        children: dict[tuple[str, ...], list[tuple[str, ...]]] = {(): []}
        leaf_keys: list[tuple[str, ...]] = []
        for raw in paths:
            path = [p.strip() for p in raw]
            if not path or not path[0]:
                continue
            chain = tuple(reversed(path))  # root side first
            for depth in range(1, len(chain) + 1):
                key = chain[:depth]
                if key not in children:
                    children[key] = []
                    children[chain[: depth - 1]].append(key)
            leaf_keys.append(chain)
        seen: dict[str, tuple[str, ...]] = {}
        for key in leaf_keys:
            leaf = key[-1]
            if leaf in seen and seen[leaf] != key:
                raise InputError(
                    f"hierarchy ({source}) lists leaf {leaf!r} twice with different ancestors",
                    hint="Give every leaf exactly one line",
                )
            seen[leaf] = key
        leaf_set = set(leaf_keys)
        nodes: list[str] = [ROOT]
        parent: list[int] = [-1]
        span: list[list[int]] = [[0, -1]]
        leaves: list[str] = []

        def visit(key: tuple[str, ...], index: int) -> None:
            first = len(leaves)
            if key in leaf_set and not children[key]:
                leaves.append(key[-1])
            for child in children[key]:
                nodes.append(child[-1])
                parent.append(index)
                span.append([0, -1])
                visit(child, len(nodes) - 1)
            span[index] = [first, len(leaves) - 1]

        visit((), 0)
        inner_leaves = [k for k in leaf_set if children[k]]
        if inner_leaves:
            raise InputError(
                f"hierarchy ({source}) uses {inner_leaves[0][-1]!r} both as a leaf and as an inner node",
                hint="Each value must be a leaf on its own line",
            )
        if not leaves:
            raise InputError(f"hierarchy ({source}) has no leaves", hint="Give one line per value")
        return cls(
            leaves=tuple(leaves),
            nodes=tuple(nodes),
            parent=tuple(parent),
            span=tuple((a, b) for a, b in span),
            source=source,
        )

    @classmethod
    def flat(cls, values: Iterable[str]) -> Hierarchy:
        """Every value directly under ``*`` (sorted for determinism).

        >>> Hierarchy.flat(["b", "a"]).leaves
        ('a', 'b')
        """
        return cls.from_paths([[v] for v in sorted({str(v) for v in values})], source="flat")

    def with_leaf(self, value: str) -> Hierarchy:
        """A copy with ``value`` added as an extra leaf directly under the root (if absent)."""
        if value in self.leaves:
            return self
        paths = [self.path(leaf)[:-1] for leaf in self.leaves] + [[value]]
        return Hierarchy.from_paths(paths, source=self.source)

    # ------------------------------------------------------------------ queries
    @property
    def n_leaves(self) -> int:
        return len(self.leaves)

    def path(self, leaf: str) -> list[str]:
        """Leaf-to-root labels, root included."""
        code = self.leaves.index(leaf)
        node = self._leaf_node(code)
        out = []
        while node >= 0:
            out.append(self.nodes[node])
            node = self.parent[node]
        return out

    def _leaf_node(self, code: int) -> int:
        for i, (a, b) in enumerate(self.span):
            if a == b == code and self.nodes[i] == self.leaves[code]:
                return i
        raise KeyError(code)  # pragma: no cover - leaves always have a node

    def lca_table(self) -> np.ndarray:
        """``T[a, b]`` = node index of the lowest common ancestor of leaves ``a`` and ``b``."""
        if self._lca is not None:
            return self._lca
        n = self.n_leaves
        table = np.zeros((n, n), dtype=np.int32)
        # deeper nodes have later indices along any root-to-leaf path, so assigning in index
        # order leaves the deepest covering node in each cell
        order = np.argsort([self.depth(i) for i in range(len(self.nodes))], kind="stable")
        for i in order:
            a, b = self.span[i]
            if b >= a:
                table[a : b + 1, a : b + 1] = i
        object.__setattr__(self, "_lca", table)
        return table

    def depth(self, node: int) -> int:
        d = 0
        while self.parent[node] >= 0:
            node = self.parent[node]
            d += 1
        return d

    def cost_table(self) -> np.ndarray:
        """NCP of generalising leaves ``a..b`` to their LCA: 0 for one leaf, else leaves(LCA)/all leaves."""
        lca = self.lca_table()
        counts = np.array([b - a + 1 for a, b in self.span], dtype=np.float64)
        table = counts[lca] / self.n_leaves
        np.fill_diagonal(table, 0.0)
        return table

    def label(self, first: int, last: int) -> str:
        """Label of the LCA of leaf codes ``first..last``."""
        if first == last:
            return self.leaves[first]
        return self.nodes[int(self.lca_table()[first, last])]

    def leaf_count(self, label: str) -> int:
        """Number of leaves under the node labelled ``label`` (1 for a leaf)."""
        for i, node in enumerate(self.nodes):
            if node == label:
                a, b = self.span[i]
                return b - a + 1
        hint = did_you_mean(label, self.nodes)
        raise InputError(f"{label!r} is not a node of this hierarchy ({self.source})", hint=hint)

    def encode(self, values: Sequence[object], *, column: str = "") -> np.ndarray:
        """Leaf codes of ``values``; unknown values raise InputError naming them."""
        lookup = {leaf: i for i, leaf in enumerate(self.leaves)}
        uniq, inverse = np.unique(np.asarray([str(v) for v in values], dtype=object), return_inverse=True)
        codes = np.empty(len(uniq), dtype=np.int32)
        for i, value in enumerate(uniq):
            if value not in lookup:
                raise InputError(
                    f"value {value!r} of column {column!r} is not a leaf of its hierarchy ({self.source})",
                    hint=did_you_mean(value, self.leaves) or "Add it to the hierarchy file",
                )
            codes[i] = lookup[value]
        return codes[inverse.reshape(-1)]


# ---------------------------------------------------------------------- files
def read_hierarchy_text(path: str | Path) -> str:
    """A hierarchy file's text: UTF-8 (a BOM dropped), else Latin-1 (ARX writes files in the platform's
    encoding; every byte sequence is valid Latin-1, so a non-UTF-8 file never raises a decoding traceback)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read hierarchy file {str(p)!r}: {exc.strerror}", hint="Check the path") from exc
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def load_hierarchy(path: str | Path) -> Hierarchy:
    """Read one ARX-format file (``leaf;parent;…;*`` per line; the trailing ``*`` is optional)."""
    p = Path(path)
    text = read_hierarchy_text(p)
    paths = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        parts = [x.strip() for x in line.split(";")]
        if parts[-1] == ROOT:
            parts = parts[:-1]
        paths.append(parts)
    return Hierarchy.from_paths(paths, source=p.name)


def _norm(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def find_hierarchy_files(directory: str | Path, columns: Iterable[str]) -> dict[str, Path]:
    """Map each column to the file in ``directory`` whose stem is the column or ends with ``_<column>``.

    Matches ``adult_marital_status.txt`` and ``adult_hierarchy_marital-status.csv`` to
    ``marital_status``. Columns without a file are left out (they get a flat tree).
    """
    d = Path(directory)
    if not d.is_dir():
        raise InputError(f"hierarchy directory {str(d)!r} does not exist", hint="Pass a folder of ARX .csv/.txt files")
    files = sorted(f for f in d.iterdir() if f.is_file() and f.suffix in {".csv", ".txt"})
    found: dict[str, Path] = {}
    for col in columns:
        c = _norm(col)
        matches = [f for f in files if _norm(f.stem) == c or _norm(f.stem).endswith("_" + c)]
        if len(matches) > 1:
            exact = [f for f in matches if _norm(f.stem) == c]
            matches = exact or sorted(matches, key=lambda f: len(f.stem))[:1]
        if matches:
            found[col] = matches[0]
    return found


def load_hierarchies(directory: str | Path | None, columns: Iterable[str]) -> dict[str, Hierarchy]:
    """Load the hierarchy files for ``columns`` found in ``directory`` (None → none)."""
    if directory is None:
        return {}
    return {col: load_hierarchy(path) for col, path in find_hierarchy_files(directory, columns).items()}
