"""Noise and privacy accounting: the only place Veil draws differential-privacy noise."""

from veil.mechanisms.budget import as_epsilon, format_epsilon
from veil.mechanisms.noise import (
    DRAW_AHEAD_MAX_SCALE,
    DiscreteLaplaceDraw,
    discrete_laplace,
    discrete_laplace_ci_halfwidth,
    discrete_laplace_draw,
    exponential,
    gaussian,
    keep_probability,
    laplace,
    laplace_ci_halfwidth,
    randomized_response,
    report_noisy_max,
)

__all__ = [
    "DRAW_AHEAD_MAX_SCALE",
    "DiscreteLaplaceDraw",
    "as_epsilon",
    "discrete_laplace",
    "discrete_laplace_ci_halfwidth",
    "discrete_laplace_draw",
    "exponential",
    "format_epsilon",
    "gaussian",
    "keep_probability",
    "laplace",
    "laplace_ci_halfwidth",
    "randomized_response",
    "report_noisy_max",
]
