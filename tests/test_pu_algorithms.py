"""uPU / nnPU / growPU: every ambiguity resolution of veil/auditor/pu/ (decisions in its package docstring) pinned by a test.

All training is seeded (``seed=``), so thresholds below are deterministic checks of the
algorithm, not statistical tests: they fail if a stage, batch rule or loss changes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from veil.auditor import pu
from veil.errors import InputError

torch.set_num_threads(1)


def blobs(n: int = 300, d: int = 10, shift: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(shift, 1, (n, d)), rng.normal(-shift, 1, (n, d))]).astype(np.float32)
    return X, np.r_[np.ones(n, bool), np.zeros(n, bool)]


class CountingAdam(torch.optim.Adam):
    steps = 0

    def step(self, closure=None):  # type: ignore[override]
        CountingAdam.steps += 1
        return super().step(closure)


def test_symmetric_losses_and_theorem_4_1():
    z = torch.linspace(-5, 5, 11)
    for kind in ("sigmoid", "linear"):
        total = pu.surrogate_loss(z, torch.ones(11), kind) + pu.surrogate_loss(z, -torch.ones(11), kind)
        assert torch.allclose(total, torch.ones(11))
    logistic = pu.surrogate_loss(z, torch.ones(11), "logistic") + pu.surrogate_loss(z, -torch.ones(11), "logistic")
    assert not torch.allclose(logistic, torch.ones(11))
    # Theorem 4.1: linear score + linear loss -> the loss of the mean is the mean of the losses.
    X, _ = blobs(50, 6)
    g = torch.nn.Linear(6, 1)
    with torch.no_grad():
        per_record = pu.surrogate_loss(g(torch.from_numpy(X)).reshape(-1), torch.ones(len(X)), "linear").mean()
        of_mean = pu.surrogate_loss(g(torch.from_numpy(X.mean(0, keepdims=True))).reshape(-1), torch.ones(1), "linear")
    assert float(per_record) == pytest.approx(float(of_mean), rel=1e-5)


def test_upu_nnpu_reject_asymmetric_loss_and_bad_inputs():
    X, _ = blobs(20, 3)
    with pytest.raises(InputError, match="symmetric"):
        pu.nnpu(X, X.mean(0), prior=0.5, loss="logistic", epochs=1)
    with pytest.raises(InputError, match="prior"):
        pu.growpu(X, X.mean(0), prior=1.5)
    with pytest.raises(InputError, match="coordinates"):
        pu.growpu(X, X.mean(0)[:2], prior=0.5)
    with pytest.raises(InputError, match="unknown growPU parameter"):
        pu.growpu(X, X.mean(0), prior=0.5, t_tun=3)
    with pytest.raises(InputError, match="unknown classifier"):
        pu.build_classifier("cnn", 3)


def test_one_train_call_is_one_optimizer_step(monkeypatch):
    """Decision 1: Train() = one Adam step; stages counted exactly, growth warm-starts (one model)."""
    monkeypatch.setattr(torch.optim, "Adam", CountingAdam)
    CountingAdam.steps = 0
    X, _ = blobs(100, 5)
    res = pu.growpu(X, X[:100].mean(0), prior=0.5, seed=1, batch_size=50, pi_pre=0.0, t_pre=7, t_tune=11, t_grow=5)
    assert res.info["pre_steps"] == 7  # pi_pre = 0 is never reached: runs T_pre steps
    assert CountingAdam.steps == 7 + res.info["grow_steps"] + 11


@pytest.mark.slow
def test_pretrain_stop_measured_on_unlabelled_rows_only():
    """Decision 3: with the b mean copies counted the share could never fall below 50%."""
    rng = np.random.default_rng(0)
    X = rng.normal(0, 1, (400, 8)).astype(np.float32)
    far_mean = np.full(8, 6.0, np.float32)
    res = pu.growpu(X, far_mean, prior=0.5, seed=0, batch_size=100, t_pre=2000, t_tune=0, t_grow=1)
    assert res.info["pre_steps"] < 2000
    assert res.info["pre_fraction"] <= 0.05
    assert res.score(far_mean[None])[0] > 0  # the mean itself is still called positive


def test_stage_stopping_rules():
    X, _ = blobs(100, 5)
    m = X[:100].mean(0)
    quick = pu.growpu(X, m, prior=0.5, seed=0, batch_size=50, pi_pre=1.0, pi_grow=0.0, t_tune=0)
    assert quick.info["pre_steps"] == 1 and quick.info["grow_steps"] == 1 and quick.info["reached_grow"]
    capped = pu.growpu(X, m, prior=0.5, seed=0, batch_size=50, pi_pre=1.0, pi_grow=1.0, t_grow=4, t_tune=0)
    assert capped.info["grow_steps"] == 4 and not capped.info["reached_grow"]  # decision 4: growth cap


def test_grow_batch_composition_and_weights():
    """Exhibit 3: b pseudo-labelled records + the mean, w_n balances, gamma discounts in fine-tune."""
    X, _ = blobs(200, 4)
    model = torch.nn.Sequential(torch.nn.Linear(4, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 1.0, 1.0, 1.0]]))
        model[0].bias.fill_(3.0)  # most records positive -> share >= pi + alpha
    mean = torch.from_numpy(X[:200].mean(0, keepdims=True))
    cfg = pu.GrowPUConfig(alpha=0.05, gamma=0.5)
    pi, b = 0.3, 100
    rng = np.random.default_rng(0)
    batch, y, w, scale, frac = pu.grow_batch(model, torch.from_numpy(X), mean, rng, b, pi, False, cfg)
    n_p = int((y[:-1] > 0).sum())
    n_n = b - n_p
    assert batch.shape == (b + 1, 4) and torch.equal(batch[-1], mean[0]) and y[-1] == 1
    assert frac == pytest.approx(n_p / b) and frac >= pi + 0.05
    assert float(w[y < 0].sum()) == pytest.approx((1 - pi) * (n_p + 1) / pi, rel=1e-5)
    assert torch.all(w[y > 0] == 1.0)
    # decision 6: scale * sum(w l) equals the paper's risk pi/(n_p+1)[...] + (1-pi)/n_n sum_N l
    z = model(batch).reshape(-1).detach()
    losses = pu.surrogate_loss(z, y, "logistic")
    paper = pi / (n_p + 1) * losses[y > 0].sum() + (1 - pi) / n_n * losses[y < 0].sum()
    assert float(scale * (w * losses).sum()) == pytest.approx(float(paper), rel=1e-5)
    _, y2, w2, _, _ = pu.grow_batch(model, torch.from_numpy(X), mean, np.random.default_rng(0), b, pi, True, cfg)
    assert torch.all(w2[y2 > 0] == 0.5)  # too many positives in fine-tune: w_p *= gamma
    assert torch.allclose(w2[y2 < 0], w[y < 0])


@pytest.mark.slow
def test_growpu_recovers_separable_class_and_is_seeded():
    X, truth = blobs(300, 10, shift=0.6)
    m = X[:300].mean(0)
    a = pu.growpu(X, m, prior=0.5, seed=3, batch_size=100, t_pre=300, t_tune=300, truth=truth, record_every=50)
    b = pu.growpu(X, m, prior=0.5, seed=3, batch_size=100, t_pre=300, t_tune=300)
    c = pu.growpu(X, m, prior=0.5, seed=4, batch_size=100, t_pre=300, t_tune=300)
    assert np.array_equal(a.scores, b.scores)
    assert not np.array_equal(a.scores, c.scores)
    assert (a.predicted == truth).mean() > 0.9
    assert a.history and a.history[-1].stage == "final" and a.history[-1].accuracy is not None
    assert {h.stage for h in a.history} >= {"fine-tune", "final"}


@pytest.mark.slow
def test_nnpu_correction_keeps_positives_while_upu_overfits():
    X, truth = blobs(300, 10, shift=0.5)
    m = X[:300].mean(0)
    nn_res = pu.nnpu(X, m, prior=0.5, seed=0, epochs=60, batch_size=100, lr=1e-2)
    u_res = pu.upu(X, m, prior=0.5, seed=0, epochs=60, batch_size=100, lr=1e-2)
    assert nn_res.info["corrections"] > 0 and u_res.info["corrections"] == 0
    assert abs(nn_res.predicted.mean() - 0.5) < abs(u_res.predicted.mean() - 0.5)
    assert (nn_res.predicted == truth).mean() > 0.8


def test_kmeans_and_projection_floor():
    X, truth = blobs(200, 5, shift=2.0)
    m = X[:200].mean(0)
    km = pu.kmeans_attack(X, m, seed=0)
    assert (km.predicted == truth).mean() > 0.95  # cluster nearer the mean is "positive"
    km_far = pu.kmeans_attack(X, X[200:].mean(0), seed=0)
    assert (km_far.predicted == ~truth).mean() > 0.95
    floor = pu.projection_floor(X, m, prior=0.3)
    assert floor.predicted.sum() == 120  # exactly round(prior * n) called positive
    assert np.array_equal(floor.score(X) > 0, floor.predicted)
    tied = np.repeat(np.eye(3, dtype=np.float32), [5, 5, 10], axis=0)  # one-hot records, many ties
    assert pu.projection_floor(tied, tied[:5].mean(0), prior=0.4).predicted.sum() == 8


def test_classifiers_shapes_and_oracle():
    assert len(pu.build_classifier("linear", 5)) == 1
    assert [m.out_features for m in pu.build_classifier("mlp", 5, hidden=(7, 3)) if isinstance(m, torch.nn.Linear)] == [7, 3, 1]
    assert any(isinstance(m, torch.nn.Dropout) and m.p == 0.2 for m in pu.build_classifier("3lp", 5))
    X, truth = blobs(100, 5, shift=1.5)
    assert (pu.oracle(X, truth, seed=0, steps=300).predicted == truth).mean() > 0.95


@pytest.mark.slow
def test_growpu_clips_the_mean_to_the_records_range():
    """Decision 9: noise on coordinates no class mean can take is removed before training.

    Ten constant columns (like MNIST's always-black pixels) carry noise in the released mean.
    Clipped to the records' range, the noisy mean is exactly the clean one, so growPU's run is
    identical to the noiseless run; unclipped, weights on those columns separate the mean from
    every record at no cost and pre-train stops far earlier (the failure seen on noisy MNIST).
    """
    X, truth = blobs(300, 10, shift=0.6)
    X = np.hstack([X, np.zeros((len(X), 10), np.float32)])
    clean = X[truth].mean(0)
    assert np.array_equal(pu.clip_to_records(X, clean), clean)  # any class mean lies in the box
    assert np.array_equal(pu.clip_to_records(X, X[::7].mean(0)), X[::7].mean(0))
    noisy = clean.copy()
    noisy[10:] = np.random.default_rng(0).laplace(0.0, 0.3, 10).astype(np.float32)
    kw = dict(prior=0.5, seed=3, batch_size=100, t_pre=2000, t_tune=300)
    a = pu.growpu(X, clean, **kw)
    b = pu.growpu(X, noisy, **kw)
    c = pu.growpu(X, noisy, clip_mean=False, **kw)
    assert a.info["mean_clipped"] == 0 and b.info["mean_clipped"] == 10 and c.info["mean_clipped"] == 0
    assert np.array_equal(a.scores, b.scores)
    assert c.info["pre_steps"] < a.info["pre_steps"] / 2
    low = pu.clip_to_records(X, np.full(X.shape[1], -50.0, np.float32))
    assert np.array_equal(low, X.min(0))
