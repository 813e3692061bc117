"""Invoke an OpenDP measurement on a NumPy vector through OpenDP's C API, without its Python argument glue.

OpenDP's own ``measurement(values)`` parses type names, wraps and unwraps every argument and builds a Python list
of the release: about 0.15–0.25 ms per call on this machine type, whatever the vector's length, where the sampler
itself costs 6–14 µs per value (docs/benchmarks.md, proxy section). A query draws one vector per statistic, so this
glue was most of the noise pass of short queries. Here the same library functions the Python binding calls
(``slice_as_object`` → ``measurement_invoke`` → ``object_as_slice``) are called directly: the samplers, the
measurement, its privacy map and the randomness (the OS CSPRNG inside OpenDP) are OpenDP's, unchanged.

Only vectors of ``f64`` or ``i64`` are handled, and only for a measurement whose input carrier type was checked
once to be that vector type (:func:`vector_call`); the release's type is checked on every call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
from opendp._lib import AnyObject, FfiResult, FfiSlice, lib, unwrap
from opendp.mod import Measurement

from veil.errors import InternalError

__all__ = ["vector_call"]

_Obj = ctypes.POINTER(AnyObject)
_Slice = ctypes.POINTER(FfiSlice)

#: The NumPy dtype of each Rust vector type handled.
_TYPES: dict[str, type[np.generic]] = {"Vec<f64>": np.float64, "Vec<i64>": np.int64}


def _function(name: str, argtypes: list[Any]) -> Any:
    # ``lib[name]`` is a new function object (``lib.name`` is shared with OpenDP's binding, which sets its own
    # argtypes on every call)
    fn = lib[name]
    fn.argtypes = argtypes
    fn.restype = FfiResult
    return fn


_SLICE_AS_OBJECT = _function("opendp_data__slice_as_object", [_Slice, ctypes.c_char_p])
_INVOKE = _function("opendp_core__measurement_invoke", [Measurement, _Obj])
_OBJECT_AS_SLICE = _function("opendp_data__object_as_slice", [_Obj])
_OBJECT_TYPE = _function("opendp_data__object_type", [_Obj])
_SLICE_FREE = _function("opendp_data__slice_free", [_Slice])
_OBJECT_FREE = _function("opendp_data__object_free", [_Obj])
_STR_FREE = _function("opendp_data__str_free", [ctypes.c_char_p])


def _ok(result: Any, kind: Any) -> Any:
    if result.tag != 0:
        unwrap(result, kind)  # raises OpenDP's own exception with its message (and frees the error)
        raise InternalError("OpenDP reported an error without raising it")
    return ctypes.cast(result.payload.Ok, kind)


def _free(fn: Any, pointer: Any) -> None:
    res = fn(pointer)
    if res.tag != 0:
        unwrap(res, ctypes.c_void_p)


def _object_type(obj: Any) -> str:
    text = _ok(_OBJECT_TYPE(obj), ctypes.c_char_p)
    try:
        return (text.value or b"").decode()
    finally:
        _free(_STR_FREE, text)


def vector_call(measurement: Measurement) -> Callable[[np.ndarray], np.ndarray]:
    """A function releasing ``measurement`` on a 1-d NumPy vector (``Vec<f64>`` or ``Vec<i64>`` in and out).

    >>> from veil.mechanisms.noise import _int_laplace
    >>> vector_call(_int_laplace(1.0))(np.zeros(3, dtype=np.int64)).dtype
    dtype('int64')
    """
    carrier = str(measurement.input_carrier_type)
    if carrier not in _TYPES:
        raise InternalError(f"vector_call handles Vec<f64> and Vec<i64> measurements, not {carrier}")
    dtype = _TYPES[carrier]
    type_name = carrier.encode()

    def call(values: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(values, dtype=dtype)
        if data.ndim != 1:
            raise InternalError(f"vector_call takes a 1-d vector, got shape {data.shape}")
        given = FfiSlice(data.ctypes.data, data.size)  # OpenDP copies it into its own vector
        arg = _ok(_SLICE_AS_OBJECT(ctypes.byref(given), type_name), _Obj)
        try:
            released = _ok(_INVOKE(measurement, arg), _Obj)
        finally:
            _free(_OBJECT_FREE, arg)
        try:
            kind = _object_type(released)
            if kind != carrier:
                raise InternalError(f"OpenDP released a {kind} for a {carrier} input")
            raw = _ok(_OBJECT_AS_SLICE(released), _Slice)
            try:
                n = int(raw.contents.len)
                if n != data.size:
                    raise InternalError(f"OpenDP released {n} values for {data.size}")
                if n == 0:
                    return np.empty(0, dtype=dtype)
                copy = np.empty(n, dtype=dtype)  # OpenDP frees its own vector below
                ctypes.memmove(copy.ctypes.data, raw.contents.ptr, n * copy.itemsize)
                return copy
            finally:
                _free(_SLICE_FREE, raw)
        finally:
            _free(_OBJECT_FREE, released)

    return call
