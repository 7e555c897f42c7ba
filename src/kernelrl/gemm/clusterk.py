"""The cluster split-K family (`kernels/cluster_splitk.cu`) through its C ABI: checks and launches."""
from __future__ import annotations

import ctypes

import torch

from kernelrl.gemm.native import clusterk_lib
from kernelrl.gemm.space import ClusterKConfig

_vp, _i = ctypes.c_void_p, ctypes.c_int

# can_implement's codes (see the source)
_WHY = {1: "needs positive sizes with K and N multiples of 8", 2: "takes a power of two from 2 to 16 splits",
        3: "has more than 65535 output tiles", 4: "cannot place a cluster this large with this much shared memory"}


def _fns(lib: ctypes.CDLL, symbol: str):
    try:
        run, can = getattr(lib, f"{symbol}_run"), getattr(lib, f"{symbol}_can_implement")
    except AttributeError as e:
        raise KeyError(f"cluster split-K configuration {symbol} is not in the built library: rebuild it "
                       "(`kernelrl gemm build`)") from e
    run.argtypes = [_vp, _vp, _vp, _i, _i, _i, _i, _i, _vp]
    can.argtypes = [_i] * 5
    return run, can


def make_launcher(cfg: ClusterKConfig, m: int, n: int, k: int, dtype=torch.float16,
                  device_index: int | None = None):
    """A function (a, b, c) -> None running the configuration on an m x n x k problem into c (row-major,
    contiguous, 16-byte aligned), on the current stream. Raises ValueError for a problem it cannot run."""
    return launcher(clusterk_lib(), cfg.symbol, cfg.name, cfg.splits, m, n, k, dtype, device_index)


def launcher(lib: ctypes.CDLL, symbol: str, name: str, splits: int, m: int, n: int, k: int,
             dtype=torch.float16, device_index: int | None = None):
    """`make_launcher` for any compiled configuration of the source: `symbol` in `lib` (the probe builds
    variants of the kernel under their own symbols)."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"cluster split-K takes fp16 or bf16, not {dtype}")
    run, can = _fns(lib, symbol)
    bf16 = int(dtype == torch.bfloat16)
    why = can(m, n, k, splits, bf16)
    if why:
        raise ValueError(f"{name} cannot run {m}x{n}x{k}: it {_WHY.get(why, f'failed with status {why}')}")
    dev = torch.cuda.current_device() if device_index is None else device_index
    raw_stream = torch._C._cuda_getCurrentRawStream

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        st = run(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, splits, bf16, raw_stream(dev))
        if st:
            raise RuntimeError(f"{name} failed to launch on {m}x{n}x{k} (status {st})")

    return launch
