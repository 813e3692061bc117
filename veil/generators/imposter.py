"""IMPOSTER (Yang et al. 2022): synthetic implicit attributes that no longer betray a sensitive one.

Model (torch, all fully connected, two hidden layers of ``hidden`` units):

* **E** (encoder) maps an encoded real row ``x_p`` of the implicit attributes, with its
  condition ``c`` (below), to a Gaussian ``q(z_l | x_p, c)`` in ``latent_dim`` dimensions. The
  paper writes ``E(x_p)``; giving E the condition too (a conditional VAE) keeps the label's
  information out of ``z_l``, so G has to take it from ``c`` — on Adult this moved TSTR income
  accuracy at λ = 0 from 0.78 to 0.82 (real data: 0.825).
* **G** (decoder / generator) maps ``(z, c)`` to the encoded space; ``c`` is the condition:
  the one-hot sensitive value ``s`` and, with ``label`` set, the one-hot class label ``y``.
  Categorical blocks leave G through a softmax, numeric coordinates are linear (they are
  quantile-normal scores, see :mod:`veil.generators.tabular_encoding`).
* **D1** judges ``(x, c)``: "real" is the VAE's pass ``x̃_p = G(E(x_p) | c)`` of a real row,
  "fake" is ``x̂_p = G(z | c)`` with ``z ~ N(0, I)`` (paper Eq. 11, Algorithm 2 lines 2–7).
* **D2** predicts ``s`` from a generated ``x̂_p`` alone (Eq. 12, lines 8–10), on balanced
  minibatches: ``m`` conditions drawn from real rows with each value of ``s``. With
  ``d2_sees_label=True`` D2 also sees the label, so G is pushed towards ``x̂ ⊥ s | y`` instead
  of ``x̂ ⊥ s`` (an option, not the paper; on Adult it did not improve TSTR).

Objective ``min_{E,G} max_{D1,D2} V1 + λ·V2 + V_VAE`` (Eqs. 10 and 13), trained per minibatch as
Algorithm 2: one ascent step for D1, one for D2, then one descent step for E and G on the sum
of G's three terms (lines 7, 10 and 11 applied together: same gradients, one optimiser step).
G's V1 term uses the usual non-saturating form ``−log D1(x̂)``; its V2 term is the paper's
minimax, ``−λ · CE(D2(x̂), s)`` (G ascends D2's cross-entropy). The VAE term is the
reconstruction loss (cross-entropy per categorical block, squared error / 2 per numeric score)
plus ``kl_weight`` × KL; the default 0.1 (not 1) keeps the latent in use — with 1 the posterior
collapsed (KL ≈ 1 nat) and G generated the columns nearly independently given ``c``. λ = 0 is the paper's
"CGAN equipped with VAE" ablation (``method="gan"``): D2 is still trained, to report how well
``s`` can be read from the generated rows, but G ignores it.

**Domains.** With ``domains`` (what ``veil publish synth`` always passes: the policy's declared
``values`` and ``lower``/``upper``, :func:`veil.generators.tabular_encoding.declared_domains`) the
sensitive values, the labels, the one-hot blocks and the numeric ranges are the declared ones, never
the values the training rows happen to hold: a category or an outlier one person alone has cannot
decide what the output may contain. Training rows outside the domains (an undeclared category, a
NA) are left out; numbers are clamped into their bounds. Without ``domains`` (library use on public
data, the benchmarks) they are the observed ones.

**Released rows.** :meth:`Imposter.publish` returns a fully synthetic table with ``rows`` rows (a public
parameter, default :data:`~veil.generators.synthetic_size.DEFAULT_ROWS`, never the source's size) and
only the columns ``sensitive``, ``label`` (if set) and the implicit attributes: each row's
condition ``c_i`` (sensitive value and label) is drawn *uniformly* over the product of their
domains (no frequency of the training rows is used: a (sensitive, label) pair one person alone has
would otherwise be copied whenever they are in training; IMPOSTER has no ε to pay for noisy
counts), and its implicit attributes are the decoded ``G(z_i | c_i)`` with a fresh
``z_i ~ N(0, I)``, categorical values sampled from G's softmax, numerics mapped back through the
inverse quantile transform and rounded for integer columns. :meth:`Imposter.generate` takes the
conditions from the caller instead (the paper's setting: each real row's own ``s`` and ``y``; for
experiments on public data). No real row and no other column is
copied, and the encoder is not used at release time (a posterior sample would carry the row's real
values, and with them ``s``). ``veil publish synth`` (:mod:`veil.generators.plugins.synth`) trains
on part of the table and checks the release against the held-out rest (distance to closest record).

Randomness: training's draws (weight initialisation, minibatches, noise) come from a private
``torch.Generator`` built from ``seed`` (a publication's: 63 bits of its private generator, never recorded; the model is
never released); the release's draws (conditions, latent noise, categories) from the ``rng`` a publication passes, 256
bits of the OS CSPRNG, never from a seed a user typed (red team s66 F1); global RNG state is never touched.
``torch.set_num_threads`` is the caller's business. Training shows a progress bar
(:func:`veil._progress.progress`) and a ``KeyboardInterrupt`` propagates, leaving the model
marked unfitted, so no caller can publish a half-trained model by accident.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import InputError, InternalError, PolicyError, did_you_mean
from veil.generators.synthetic_size import DEFAULT_ROWS, check_rows
from veil.generators.tabular_encoding import ColumnDomain, TabularEncoder

__all__ = ["EpochStats", "Imposter"]


@dataclass(frozen=True)
class EpochStats:
    """Training figures for one epoch (means over its minibatches)."""

    epoch: int
    seconds: float
    d1_loss: float
    d2_loss: float
    d2_accuracy: float
    reconstruction: float
    kl: float


@dataclass
class Imposter:
    """IMPOSTER generator over the ``implicit`` columns of a table.

    >>> import pandas as pd
    >>> df = pd.DataFrame({"s": ["a", "b"] * 40, "x": ["p", "q"] * 40, "y": [0, 0, 1, 1] * 20})
    >>> model = Imposter(implicit=["x"], sensitive="s", label="y", epochs=2, seed=0).fit(df)
    >>> out = model.publish(df, seed=1, rows=50)
    >>> list(out.columns), set(out["x"]) <= {"p", "q"}, len(out)
    (['s', 'y', 'x'], True, 50)
    """

    implicit: Sequence[str]
    sensitive: str
    label: str | None = None
    lam: float = 1.0
    epochs: int = 30
    batch_size: int = 500
    latent_dim: int = 16
    hidden: int = 128
    lr: float = 1e-3
    kl_weight: float = 0.1
    d2_sees_label: bool = False
    seed: int | None = None
    domains: Mapping[str, ColumnDomain] | None = None
    history: list[EpochStats] = field(default_factory=list, init=False)
    fitted: bool = field(default=False, init=False)
    encoder_: TabularEncoder | None = field(default=None, init=False, repr=False)
    _nets: Any = field(default=None, init=False, repr=False)
    _s_values: tuple[Any, ...] = field(default=(), init=False, repr=False)
    _y_values: tuple[Any, ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        self.implicit = [str(c) for c in self.implicit]
        if not self.implicit:
            raise InputError(
                "IMPOSTER needs at least one implicit attribute", hint="Run `veil audit implicit` to find them, or pass --columns"
            )
        if self.sensitive in self.implicit:
            raise InputError(
                f"the sensitive column {self.sensitive!r} cannot also be an implicit attribute",
                hint="Remove it from the implicit columns",
            )
        if self.label is not None and self.label in self.implicit:
            raise InputError(
                f"the label column {self.label!r} cannot also be an implicit attribute",
                hint="Remove it from the implicit columns or drop --label",
            )
        if not (isinstance(self.lam, (int, float)) and math.isfinite(self.lam) and self.lam >= 0):
            raise InputError(f"lambda must be a finite number ≥ 0, got {self.lam!r}", hint="Use 1.0 (paper default)")
        for name, value, low in (
            ("epochs", self.epochs, 1),
            ("batch_size", self.batch_size, 2),
            ("latent_dim", self.latent_dim, 1),
            ("hidden", self.hidden, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(f"{name} must be an integer ≥ {low}, got {value!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise InputError(f"lr must be a positive number, got {self.lr!r}")
        if self.domains is not None:
            cond = [self.sensitive] + ([self.label] if self.label else [])
            for name in [*cond, *self.implicit]:
                if name not in self.domains:
                    raise PolicyError(
                        f"column {name!r} has no declared domain",
                        hint="Pass a domain for every column (declared_domains() builds them from the policy)",
                    )
            for name in cond:
                if not self.domains[name].categorical:
                    raise PolicyError(
                        f"condition column {name!r} needs declared values (IMPOSTER conditions on its categories)",
                        hint=f"Declare values = [...] for {name!r} in the policy",
                    )
            values = self.domains[self.sensitive].values or ()
            if len(values) < 2:
                raise PolicyError(
                    f"sensitive column {self.sensitive!r} declares {len(values)} value(s)", hint="Nothing to protect"
                )

    # ---------------------------------------------------------------- data preparation
    def _check_frame(self, df: pd.DataFrame, *, need_implicit: bool) -> None:
        needed = [self.sensitive] + ([self.label] if self.label else [])
        needed += list(self.implicit) if need_implicit else []
        for name in needed:
            if name not in df.columns:
                raise InputError(
                    f"column {name!r} is not in the table", hint=did_you_mean(name, df.columns) or f"Columns: {list(df.columns)}"
                )
        for name in [self.sensitive] + ([self.label] if self.label else []):
            if self.domains is None and df[name].isna().any():
                raise InputError(
                    f"column {name!r} has {int(df[name].isna().sum())} missing values",
                    hint="IMPOSTER conditions on it; drop those rows first",
                )

    def _conditions(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """One-hot condition matrix and integer sensitive codes for ``df``'s rows."""
        s_index = {v: i for i, v in enumerate(self._s_values)}
        s = df[self.sensitive].map(s_index)
        if s.isna().any():
            bad = df[self.sensitive][s.isna()].iloc[0]
            raise InputError(f"sensitive value {bad!r} is not {self._known}", hint=f"Known: {list(self._s_values)}")
        s_codes = s.to_numpy(dtype=np.int64)
        parts = [np.eye(len(self._s_values), dtype=np.float32)[s_codes]]
        if self.label:
            y_index = {v: i for i, v in enumerate(self._y_values)}
            y = df[self.label].map(y_index)
            if y.isna().any():
                bad = df[self.label][y.isna()].iloc[0]
                raise InputError(f"label value {bad!r} is not {self._known}", hint=f"Known: {list(self._y_values)}")
            parts.append(np.eye(len(self._y_values), dtype=np.float32)[y.to_numpy(dtype=np.int64)])
        return np.hstack(parts), s_codes

    # ---------------------------------------------------------------- training
    def fit(self, df: pd.DataFrame, *, on_epoch: Callable[[EpochStats], None] | None = None) -> Imposter:
        """Train on ``df`` (Algorithm 2 for ``epochs`` passes over the rows)."""
        import torch

        from veil._progress import progress

        self._check_frame(df, need_implicit=True)
        if self.domains is not None:
            # rows outside the declared domains are left out (as queries leave them out), never refused
            df = df[TabularEncoder.in_domain(df, self._used_domains())].reset_index(drop=True)
        if len(df) < 4:
            raise InputError(f"IMPOSTER needs at least 4 rows to train, got {len(df)}")
        self.fitted = False
        self.history = []
        if self.domains is not None:
            self._s_values = tuple(self.domains[self.sensitive].values or ())
            self._y_values = tuple(self.domains[self.label].values or ()) if self.label else ()
        else:
            self._s_values = tuple(sorted(pd.unique(df[self.sensitive]).tolist(), key=str))
            if len(self._s_values) < 2:
                raise InputError(f"sensitive column {self.sensitive!r} has a single value", hint="Nothing to protect")
            if self.label:
                self._y_values = tuple(sorted(pd.unique(df[self.label]).tolist(), key=str))
        implicit_domains = None if self.domains is None else {c: self.domains[c] for c in self.implicit}
        self.encoder_ = TabularEncoder.fit(df[list(self.implicit)], domains=implicit_domains)
        x_all = torch.from_numpy(self.encoder_.encode(df[list(self.implicit)]))
        c_np, s_np = self._conditions(df)
        c_all, s_all = torch.from_numpy(c_np.copy()), torch.from_numpy(s_np.copy())
        gen = torch.Generator().manual_seed(_seed_from(self.seed))
        n_s = len(self._s_values)
        d2_label = bool(self.d2_sees_label and self.label)
        nets = _Nets.build(
            self.encoder_,
            c_all.shape[1],
            n_s,
            self.latent_dim,
            self.hidden,
            gen,
            d2_extra=c_all.shape[1] - n_s if d2_label else 0,
        )
        self._nets = nets
        n = len(df)
        m = min(self.batch_size, n)
        by_s = [torch.nonzero(s_all == k).flatten() for k in range(len(self._s_values))]
        by_s = [g for g in by_s if len(g)]  # a declared value no training row holds has no real rows to draw
        opt_d1 = torch.optim.Adam(nets.d1.parameters(), lr=self.lr, betas=(0.5, 0.9))
        opt_d2 = torch.optim.Adam(nets.d2.parameters(), lr=self.lr, betas=(0.5, 0.9))
        g_params = list(nets.enc.parameters()) + list(nets.dec.parameters())
        opt_g = torch.optim.Adam(g_params, lr=self.lr, betas=(0.5, 0.9))
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        ce = torch.nn.functional.cross_entropy
        try:
            bar = progress(range(self.epochs), desc=f"IMPOSTER λ={self.lam:g}", unit="epoch")
            for epoch in bar:
                t0 = time.perf_counter()
                perm = torch.randperm(n, generator=gen)
                sums = np.zeros(5)
                batches = 0
                for start in range(0, n - m + 1, m):
                    idx = perm[start : start + m]
                    x, c = x_all[idx], c_all[idx]
                    # lines 2-6: D1 on the VAE pass of real rows vs prior samples, same conditions
                    mu, logvar = nets.encode(torch.cat([x, c], 1))
                    z_l = mu + torch.randn(mu.shape, generator=gen) * torch.exp(0.5 * logvar)
                    logits_rec = nets.dec(torch.cat([z_l, c], 1))
                    x_tilde = nets.activate(logits_rec)
                    z = torch.randn((m, self.latent_dim), generator=gen)
                    x_hat = nets.activate(nets.dec(torch.cat([z, c], 1)))
                    d_real = nets.d1(torch.cat([x_tilde.detach(), c], 1))
                    d_fake = nets.d1(torch.cat([x_hat.detach(), c], 1))
                    loss_d1 = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
                    opt_d1.zero_grad()
                    loss_d1.backward()
                    opt_d1.step()
                    # line 8: balanced minibatch, m conditions per sensitive value
                    bal = torch.cat([g[torch.randint(len(g), (m,), generator=gen)] for g in by_s])
                    c_bal, s_bal = c_all[bal], s_all[bal]
                    z2 = torch.randn((len(bal), self.latent_dim), generator=gen)
                    x_bal = nets.activate(nets.dec(torch.cat([z2, c_bal], 1)))
                    # line 9: D2 ascends V2 (predicts s from generated rows)
                    y_bal = c_bal[:, n_s:] if d2_label else c_bal[:, :0]
                    d2_out = nets.d2(torch.cat([x_bal.detach(), y_bal], 1))
                    loss_d2 = ce(d2_out, s_bal)
                    opt_d2.zero_grad()
                    loss_d2.backward()
                    opt_d2.step()
                    d2_acc = float((d2_out.argmax(1) == s_bal).float().mean())
                    # lines 7, 10, 11: one descent step for E and G
                    d_fake_g = nets.d1(torch.cat([x_hat, c], 1))
                    g_v1 = bce(d_fake_g, torch.ones_like(d_fake_g))
                    g_v2 = -ce(nets.d2(torch.cat([x_bal, y_bal], 1)), s_bal) if self.lam > 0 else torch.zeros(())
                    recon = nets.reconstruction(logits_rec, x)
                    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)).mean()
                    loss_g = g_v1 + self.lam * g_v2 + recon + self.kl_weight * kl
                    opt_g.zero_grad()
                    loss_g.backward()
                    opt_g.step()
                    sums += [loss_d1.item(), loss_d2.item(), d2_acc, recon.item(), kl.item()]
                    batches += 1
                mean = sums / max(batches, 1)
                stats = EpochStats(epoch + 1, time.perf_counter() - t0, *[float(v) for v in mean])
                self.history.append(stats)
                if hasattr(bar, "set_postfix"):
                    bar.set_postfix(d2_acc=f"{stats.d2_accuracy:.2f}", rec=f"{stats.reconstruction:.2f}")
                if on_epoch is not None:
                    on_epoch(stats)
        except KeyboardInterrupt:
            self.fitted = False
            raise
        self.fitted = True
        return self

    # ---------------------------------------------------------------- generation
    def generate(
        self, conditions: pd.DataFrame, *, seed: int | None = None, rng: np.random.Generator | None = None
    ) -> pd.DataFrame:
        """Implicit columns for each row of ``conditions`` (which holds ``sensitive`` [and ``label``]).

        ``rng`` (a publication's: 256 bits of the OS CSPRNG) draws the latent noise and the categories; without it,
        ``seed`` (library use and tests; None: fresh randomness) seeds them."""
        import torch

        if not self.fitted or self._nets is None or self.encoder_ is None:
            raise InputError("the IMPOSTER model is not trained", hint="Call fit() first (or let training finish)")
        self._check_frame(conditions, need_implicit=False)
        c_np, _ = self._conditions(conditions)
        if rng is None:
            rng = _rng_from(seed)
        outs = []
        with torch.no_grad():
            c_all = torch.from_numpy(c_np.copy())
            for start in range(0, len(c_all), 8192):
                c = c_all[start : start + 8192]
                z = torch.from_numpy(rng.standard_normal((len(c), self.latent_dim)).astype(np.float32))
                outs.append(self._nets.activate(self._nets.dec(torch.cat([z, c], 1))).numpy())
        matrix = np.vstack(outs) if outs else np.zeros((0, self.encoder_.width), dtype=np.float32)
        out = self.encoder_.decode(matrix, sample=True, rng=rng)
        out.index = conditions.index
        return out

    def publish(
        self,
        df: pd.DataFrame,
        *,
        seed: int | None = None,
        rows: int = DEFAULT_ROWS,
        rng: np.random.Generator | None = None,
    ) -> pd.DataFrame:
        """A fully synthetic table of ``rows`` rows (public, never ``len(df)``: the size of a synthetic table
        would otherwise say whether one person is in the source; see module docstring): no column of ``df`` is
        copied, and no frequency of it is used: the conditions are uniform over the product of the sensitive
        and label domains. ``df`` gives the column types only."""
        if not self.fitted:
            raise InputError("the IMPOSTER model is not trained", hint="Call fit() first (or let training finish)")
        self._check_frame(df, need_implicit=False)
        cond_cols = [self.sensitive] + ([self.label] if self.label else [])
        if rng is None:  # a publication passes its private generator (red team s66 F1); a seed is for library use
            rng = _rng_from(seed)
        n = check_rows(rows, "imposter")
        conditions = pd.DataFrame(
            {self.sensitive: np.array(self._s_values, dtype=object)[rng.integers(len(self._s_values), size=n)]}
        )
        if self.label:
            conditions[self.label] = np.array(self._y_values, dtype=object)[rng.integers(len(self._y_values), size=n)]
        for name in cond_cols:
            conditions[name] = _as_dtype(conditions[name], df[name].dtype)
        synthetic = self.generate(conditions, rng=rng)
        out = conditions.copy()
        for name in self.implicit:
            out[name] = synthetic[name].to_numpy()
            if name in df.columns:
                out[name] = _as_dtype(out[name], df[name].dtype)
        return out

    @property
    def _known(self) -> str:
        return "a declared value" if self.domains is not None else "a value seen in training"

    def _used_domains(self) -> dict[str, ColumnDomain]:
        if self.domains is None:
            raise InternalError("_used_domains() called without domains")
        cond = [self.sensitive] + ([self.label] if self.label else [])
        return {c: self.domains[c] for c in [*cond, *self.implicit]}

    def params(self) -> dict[str, Any]:
        """Parameters for the release record."""
        return {
            "lambda": self.lam,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "latent_dim": self.latent_dim,
            "hidden": self.hidden,
            "lr": self.lr,
            "kl_weight": self.kl_weight,
            "d2_sees_label": self.d2_sees_label,
            "implicit": list(self.implicit),
            "sensitive": self.sensitive,
            "label": self.label,
            "domains": "observed" if self.domains is None else "declared",
        }


def _as_dtype(col: pd.Series, dtype: Any) -> pd.Series:
    """``col`` as ``dtype`` where that loses nothing (a categorical dtype of the training rows would turn a
    declared value they lack into NA), else unchanged."""
    try:
        cast = col.astype(dtype)
    except (TypeError, ValueError):
        return col
    return cast if int(cast.isna().sum()) == int(col.isna().sum()) else col


def _rng_from(seed: int | None) -> np.random.Generator:
    """The generator of a library call's draws: ``seed``'s, else 256 fresh bits of the OS CSPRNG."""
    from veil.generators.randomness import private_rng

    return private_rng() if seed is None else np.random.default_rng(_seed_from(seed))


def _seed_from(seed: int | None) -> int:
    if seed is None:
        return int.from_bytes(np.random.SeedSequence().generate_state(2, dtype=np.uint32).tobytes(), "little")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed must be an integer, got {seed!r}")
    return seed


class _Nets:
    """E, G, D1, D2 and the output activation for one encoder layout."""

    def __init__(
        self, enc: Any, dec: Any, d1: Any, d2: Any, spans: list[tuple[int, int]], numeric: list[int], width: int
    ) -> None:
        self.enc, self.dec, self.d1, self.d2 = enc, dec, d1, d2
        self.spans, self.numeric, self.width = spans, numeric, width

    @classmethod
    def build(cls, encoder: TabularEncoder, c_dim: int, k_s: int, latent: int, hidden: int, gen: Any, d2_extra: int = 0) -> _Nets:
        import torch
        from torch import nn

        d = encoder.width

        def mlp(n_in: int, n_out: int, act: type[nn.Module]) -> nn.Sequential:
            def linear(a: int, b: int) -> nn.Linear:  # no default init: it would draw from the global RNG
                return torch.nn.utils.skip_init(nn.Linear, a, b)

            net = nn.Sequential(linear(n_in, hidden), act(), linear(hidden, hidden), act(), linear(hidden, n_out))
            for layer in net:
                if isinstance(layer, nn.Linear):
                    bound = 1.0 / math.sqrt(layer.in_features)
                    with torch.no_grad():
                        layer.weight.uniform_(-bound, bound, generator=gen)
                        layer.bias.uniform_(-bound, bound, generator=gen)
            return net

        leaky = nn.LeakyReLU
        return cls(
            mlp(d + c_dim, 2 * latent, nn.ReLU),
            mlp(latent + c_dim, d, nn.ReLU),
            mlp(d + c_dim, 1, leaky),
            mlp(d + d2_extra, k_s, leaky),
            encoder.softmax_spans(),
            encoder.numeric_index(),
            d,
        )

    def encode(self, x: Any) -> tuple[Any, Any]:
        out = self.enc(x)
        half = out.shape[1] // 2
        return out[:, :half], out[:, half:].clamp(-10.0, 10.0)

    def activate(self, logits: Any) -> Any:
        import torch

        parts = []
        covered = 0
        pieces: list[tuple[int, int, bool]] = sorted(
            [(a, b, True) for a, b in self.spans] + [(i, i + 1, False) for i in self.numeric]
        )
        for a, b, soft in pieces:
            if a != covered:
                raise InternalError(f"encoder layout has a gap at column {covered}")
            parts.append(torch.softmax(logits[:, a:b], 1) if soft else logits[:, a:b])
            covered = b
        if covered != self.width:
            raise InternalError(f"encoder layout covers {covered} of {self.width} columns")
        return torch.cat(parts, 1)

    def reconstruction(self, logits: Any, target: Any) -> Any:
        import torch

        loss = torch.zeros(())
        for a, b in self.spans:
            loss = loss + torch.nn.functional.cross_entropy(logits[:, a:b], target[:, a:b].argmax(1))
        if self.numeric:
            idx = torch.tensor(self.numeric)
            loss = loss + 0.5 * ((logits[:, idx] - target[:, idx]) ** 2).sum(1).mean()
        return loss
