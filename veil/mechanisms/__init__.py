"""Noise and privacy accounting: the only place Veil draws differential-privacy noise."""

from veil.mechanisms.budget import as_epsilon, format_epsilon
from veil.mechanisms.noise import (
    DRAW_AHEAD_MAX_SCALE,
    DiscreteLaplaceDraw,
    LaplaceLatticeDraw,
    discrete_laplace,
    discrete_laplace_ci_halfwidth,
    discrete_laplace_draw,
    exponential,
    fixed_lattice,
    gaussian,
    keep_probability,
    laplace,
    laplace_ci_halfwidth,
    laplace_fixed,
    laplace_lattice_draw,
    randomized_response,
    report_noisy_max,
)

__all__ = [
    "DRAW_AHEAD_MAX_SCALE",
    "DiscreteLaplaceDraw",
    "LaplaceLatticeDraw",
    "as_epsilon",
    "discrete_laplace",
    "discrete_laplace_ci_halfwidth",
    "discrete_laplace_draw",
    "exponential",
    "fixed_lattice",
    "format_epsilon",
    "gaussian",
    "keep_probability",
    "laplace",
    "laplace_ci_halfwidth",
    "laplace_fixed",
    "laplace_lattice_draw",
    "randomized_response",
    "report_noisy_max",
]
