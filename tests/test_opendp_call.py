"""OpenDP's measurements called through its C API (``veil.mechanisms._opendp_call``): the same releases as OpenDP's
own Python binding, errors raised as OpenDP raises them, and no other input types taken.

The statistical tests use α = ``STAT_ALPHA`` (false-failure rate per test under a correct sampler) and check power
against a scale off by ±30%, as tests/test_core_mechanisms.py does for whole vectors.
"""

from __future__ import annotations

import numpy as np
import pytest
from opendp.domains import atom_domain
from opendp.measurements import make_laplace
from opendp.metrics import absolute_distance
from opendp.mod import OpenDPException
from scipy import stats

from tests.conftest import STAT_ALPHA
from veil.errors import InternalError
from veil.mechanisms._opendp_call import vector_call
from veil.mechanisms.noise import _int_laplace, discrete_laplace, laplace


def test_one_value_at_a_time_has_the_law_of_the_scale() -> None:
    """A query draws a few values per call: 10,000 calls of one value each follow Laplace(scale) around the input."""
    scale, centre = 7.0, 1e6
    draws = np.array([laplace([centre], scale=scale, sensitivity=1.0)[0] for _ in range(10_000)]) - centre
    assert stats.kstest(draws, stats.laplace(scale=scale).cdf).pvalue > STAT_ALPHA
    for wrong in (0.7 * scale, 1.3 * scale):
        assert stats.kstest(draws, stats.laplace(scale=wrong).cdf).pvalue < STAT_ALPHA


def test_integer_releases_match_opendps_own_binding() -> None:
    """The same measurement called both ways: two samples of one law (two-sample KS), integers kept exact."""
    scale = 5.0
    m = _int_laplace(scale)
    ours = np.concatenate([vector_call(m)(np.full(50, 2**40, dtype=np.int64)) for _ in range(320)]) - 2**40
    theirs = np.concatenate([np.asarray(m(np.full(50, 2**40, dtype=np.int64))) for _ in range(320)]) - 2**40
    assert ours.dtype == np.int64
    assert stats.ks_2samp(ours, theirs).pvalue > STAT_ALPHA
    wider = discrete_laplace(np.zeros(16_000, dtype=np.int64), scale=1.3 * scale)
    assert stats.ks_2samp(ours, wider).pvalue < STAT_ALPHA, "the test cannot tell a 30% wider scale"


def test_an_error_of_the_c_api_is_raised_as_opendps_own() -> None:
    """OpenDP's invoke saturates rather than fails on the inputs Veil passes, so the error path is driven through the
    first call of the chain with a type OpenDP does not know."""
    import ctypes

    from veil.mechanisms import _opendp_call as c

    given = c.FfiSlice(np.zeros(2).ctypes.data, 2)
    with pytest.raises(OpenDPException):
        c._ok(c._SLICE_AS_OBJECT(ctypes.byref(given), b"Vec<veil>"), c._Obj)
    assert vector_call(_int_laplace(1.0))(np.zeros(2, dtype=np.int64)).shape == (2,)


def test_only_vectors_of_f64_or_i64_are_taken() -> None:
    with pytest.raises(InternalError, match="Vec<f64> and Vec<i64>"):
        vector_call(make_laplace(atom_domain(T=float, nan=False), absolute_distance(T=float), scale=1.0))  # one f64
    with pytest.raises(InternalError, match="1-d vector"):
        vector_call(_int_laplace(1.0))(np.zeros((2, 2), dtype=np.int64))
    assert vector_call(_int_laplace(1.0))(np.zeros(0, dtype=np.int64)).shape == (0,)
