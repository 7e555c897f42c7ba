"""Persisting L2 on CUDA: notice a candidate's set-aside (cache persistence) and reset it between timed calls.

Uses the driver API (libcuda) on the context torch made current; every function returns None where CUDA
or the driver entry point is unavailable.
"""
from __future__ import annotations

import ctypes

_CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
_lib = None


def _cuda():
    global _lib
    if _lib is None:
        try:
            _lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            _lib = False
    return _lib or None


def persisting_l2_bytes() -> int | None:
    """The current context's persisting-L2 set-aside in bytes (0 unless someone asked for it)."""
    lib = _cuda()
    if lib is None:
        return None
    value = ctypes.c_size_t(0)
    if lib.cuCtxGetLimit(ctypes.byref(value), _CU_LIMIT_PERSISTING_L2_CACHE_SIZE) != 0:
        return None
    return int(value.value)


def reset_persisting_l2() -> bool | None:
    """Drop every persisting line and the set-aside itself; True when both calls succeeded."""
    lib = _cuda()
    if lib is None:
        return None
    ok = lib.cuCtxResetPersistingL2Cache() == 0
    return ok and lib.cuCtxSetLimit(_CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0)) == 0
