"""The cluster split-K family (`kernels/cluster_splitk.cu`) through its C ABI: checks, workspaces and launches."""
from __future__ import annotations

import ctypes

import torch

from kernelrl.gemm.native import clusterk_lib
from kernelrl.gemm.space import ClusterKConfig
from kernelrl.gemm.streams import PerStream

_vp, _i, _ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong

# can_implement's codes (see the source)
_WHY = {1: "needs positive sizes with K and N multiples of 8",
        2: "takes a power of two from 2 to 16 splits, or 3, 5, 6, 7 or 9 to 13 with one cluster per tile",
        3: "has more than 65535 output tiles", 4: "cannot place a cluster this large with this much shared memory",
        5: "takes 1 to 1024 groups of clusters per tile (more than 1 only with the pushed reduction)"}

# The workspace of launches with several clusters per tile: fp32 sums of each group, and counters that must be
# 0 before a stream's first launch (every launch leaves them 0). One set per stream, as for cuBLASLt.
WORKSPACES = PerStream(lambda dev, sizes: (torch.empty(sizes[0], dtype=torch.float32, device=f"cuda:{dev}"),
                                           torch.zeros(sizes[1], dtype=torch.int32, device=f"cuda:{dev}")))


def _fns(lib: ctypes.CDLL, symbol: str):
    try:
        run, can = getattr(lib, f"{symbol}_run"), getattr(lib, f"{symbol}_can_implement")
        ws, most = getattr(lib, f"{symbol}_workspace"), getattr(lib, f"{symbol}_max_clusters")
    except AttributeError as e:
        raise KeyError(f"cluster split-K configuration {symbol} is not in the built library (or was built from an "
                       "older source): rebuild it (`kernelrl gemm build`)") from e
    run.argtypes = [_vp, _vp, _vp, _i, _i, _i, _i, _i, _vp, _vp, _i, _vp]
    can.argtypes = [_i] * 6
    ws.argtypes = [_i, _i, _i, _i, ctypes.POINTER(_ll), ctypes.POINTER(_ll)]
    ws.restype = None
    most.argtypes = [_i] * 3
    return run, can, ws, most


def max_active_clusters(cfg: ClusterKConfig, dtype=torch.float16) -> int:
    """How many clusters of `cfg.splits` blocks of this configuration the current GPU runs at once, by CUDA's
    occupancy calculator: as many blocks per SM as the shared memory allows, and each cluster within one GPC
    (so a GPC whose SMs are not a multiple of the cluster size leaves some idle)."""
    most = _fns(clusterk_lib(), cfg.symbol)[3]
    clusters = most(cfg.splits, cfg.groups, int(dtype == torch.bfloat16))
    if clusters < 0:
        raise RuntimeError(f"{cfg.name}: the occupancy query failed (cudaError {-clusters})")
    return clusters


def make_launcher(cfg: ClusterKConfig, m: int, n: int, k: int, dtype=torch.float16,
                  device_index: int | None = None):
    """A function (a, b, c) -> None running the configuration on an m x n x k problem into c (row-major,
    contiguous, 16-byte aligned), on the current stream. Raises ValueError for a problem it cannot run."""
    return launcher(clusterk_lib(), cfg.symbol, cfg.name, cfg.splits, m, n, k, dtype, device_index, cfg.groups)


def launcher(lib: ctypes.CDLL, symbol: str, name: str, splits: int, m: int, n: int, k: int,
             dtype=torch.float16, device_index: int | None = None, groups: int = 1):
    """`make_launcher` for any compiled configuration of the source: `symbol` in `lib` (the probe builds
    variants of the kernel under their own symbols). With `groups` > 1 each stream gets its own workspace
    (`WORKSPACES`), taken on the stream's first call."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"cluster split-K takes fp16 or bf16, not {dtype}")
    run, can, ws_size, _ = _fns(lib, symbol)
    bf16 = int(dtype == torch.bfloat16)
    why = can(m, n, k, splits, groups, bf16)
    if why:
        raise ValueError(f"{name} cannot run {m}x{n}x{k}: it {_WHY.get(why, f'failed with status {why}')}")
    dev = torch.cuda.current_device() if device_index is None else device_index
    raw_stream = torch._C._cuda_getCurrentRawStream
    what = f"{name} on {m}x{n}x{k}"  # the C++ hot path's message for a failed launch
    if groups == 1:
        def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
            st = run(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, splits, 1, None, None, bf16, raw_stream(dev))
            if st:
                raise RuntimeError(f"{name} failed to launch on {m}x{n}x{k} (status {st})")

        launch.native = ("clusterk", ctypes.cast(run, _vp).value, None, (k, splits, 1, bf16), what)
        return launch

    floats, counters = _ll(), _ll()
    ws_size(m, n, splits, groups, ctypes.byref(floats), ctypes.byref(counters))
    sizes = (floats.value, counters.value)
    WORKSPACES.reserve(dev, sizes)
    per_stream: dict[int, tuple[int, int, tuple]] = {}  # stream -> (workspace pointer, counters pointer, the set)

    def buffers(stream: int) -> tuple[int, int, tuple]:
        bufs = WORKSPACES.get(stream, dev, sizes)
        per_stream[stream] = entry = (bufs[0].data_ptr(), bufs[1].data_ptr(), bufs)
        return entry

    buffers(raw_stream(dev))

    def launch_grouped(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        stream = raw_stream(dev)
        ws, cnt, _ = per_stream.get(stream) or buffers(stream)
        st = run(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, splits, groups, ws, cnt, bf16, stream)
        if st:
            raise RuntimeError(f"{name} failed to launch on {m}x{n}x{k} (status {st})")

    launch_grouped.workspaces = per_stream
    launch_grouped.native = ("clusterk", ctypes.cast(run, _vp).value, per_stream, (k, splits, groups, bf16), what)
    return launch_grouped
