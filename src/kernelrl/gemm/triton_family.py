"""The Triton families: launch the persistent TMA kernel, or the split-K kernel, for one configuration with
little Python overhead."""
from __future__ import annotations

import torch

from kernelrl.gemm.space import NUM_SMS, SPLITK_MAX_OUTPUT, SplitKConfig, TritonConfig


def _descriptor(t: torch.Tensor, block: list[int]):
    from triton.tools.tensor_descriptor import TensorDescriptor

    # Skip TensorDescriptor's per-call validation: the caller checked contiguity and 16-byte alignment.
    d = TensorDescriptor.__new__(TensorDescriptor)
    d.base, d.shape, d.strides, d.block_shape, d.padding = t, list(t.shape), list(t.stride()), block, "zero"
    return d


def make_launcher(cfg: TritonConfig, m: int, n: int, k: int, acc_fp16: bool = False):
    """A function (a, b, c) -> None running the Triton kernel for an m x n x k problem into c.

    The first call goes through Triton's JIT (compiling if needed); later calls launch the compiled kernel
    directly, skipping the JIT's argument binding."""
    from kernelrl.gemm.kernels.triton_tma import matmul_tma_persistent

    tiles = -(-m // cfg.bm) * -(-n // cfg.bn)
    grid = (min(NUM_SMS, tiles),)
    jit = matmul_tma_persistent[grid]
    meta = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, NUM_SMS=NUM_SMS,
                WARP_SPECIALIZE=cfg.ws, FLATTEN=False, ACC_FP16=acc_fp16)
    constexprs = tuple(meta.values())  # in the kernel's parameter order, after the runtime arguments
    a_blk, b_blk, c_blk = [cfg.bm, cfg.bk], [cfg.bk, cfg.bn], [cfg.bm, cfg.bn]
    raw_stream = torch._C._cuda_getCurrentRawStream
    compiled = []

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        da, db, dc = _descriptor(a, a_blk), _descriptor(b, b_blk), _descriptor(c, c_blk)
        if compiled:
            kern = compiled[0]
            kern.run(grid[0], 1, 1, raw_stream(a.device.index), kern.function, kern.packed_metadata, None, None,
                     None, da, db, dc, m, n, k, *constexprs)
        else:
            compiled.append(jit(da, db, dc, m, n, k, **meta, num_warps=cfg.warps, num_stages=cfg.stages))

    return launch


class _Scratch:
    """Zeroed fp32 workspaces and tile counters of the split-K kernels, one pair per CUDA stream.

    The kernel leaves both at zero when it finishes, so a pair is zeroed once, when it is made. Kernels of one
    stream run one after the other and share a pair; kernels of two streams could run at the same time, so
    each stream has its own (as torch gives cuBLAS a workspace per stream; two graphs captured on one stream
    share theirs). A stream first seen during CUDA-graph capture takes a spare pair zeroed ahead of time
    (`reserve`, called when a launcher is made), so that no graph depends on another graph's zeroing."""

    def __init__(self):
        self._pairs: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._spare: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def _fits(pair, floats: int, counters: int) -> bool:
        return pair is not None and pair[0].numel() >= floats and pair[1].numel() >= counters

    @staticmethod
    def _zeros(device: int, floats: int, counters: int, old=None) -> tuple[torch.Tensor, torch.Tensor]:
        """A zeroed pair of at least this size and at least the size of `old`."""
        if old is not None:
            floats, counters = max(floats, old[0].numel()), max(counters, old[1].numel())
        return (torch.zeros(floats, dtype=torch.float32, device=f"cuda:{device}"),
                torch.zeros(counters, dtype=torch.int32, device=f"cuda:{device}"))

    def reserve(self, device: int, floats: int, counters: int) -> None:
        """Keep a zeroed spare pair of at least this size for a stream first seen during graph capture."""
        spare = self._spare.get(device)
        if not self._fits(spare, floats, counters) and not torch.cuda.is_current_stream_capturing():
            self._spare[device] = self._zeros(device, floats, counters, spare)

    def get(self, stream: int, device: int, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
        key = (device, stream)
        pair = self._pairs.get(key)
        if not self._fits(pair, floats, counters):
            if torch.cuda.is_current_stream_capturing() and self._fits(self._spare.get(device), floats, counters):
                pair = self._spare.pop(device)
            else:  # eager: zeroed now; under capture without a spare: zeroed by the graph before its kernels
                pair = self._zeros(device, floats, counters, pair)
            self._pairs[key] = pair  # a replaced pair stays alive in the launchers that hold it
        return pair


SCRATCH = _Scratch()


def make_splitk_launcher(cfg: SplitKConfig, m: int, n: int, k: int):
    """A function (a, b, c) -> None running the Triton split-K kernel for an m x n x k problem into c.

    Like `make_launcher`, the first call compiles and later calls launch the compiled kernel directly. With
    torch's deterministic mode on, the call runs torch.matmul instead (split-K sums in a varying order)."""
    if cfg.splits > 1 and m * n > SPLITK_MAX_OUTPUT:
        raise ValueError(f"{cfg.name}: a {m}x{n} output is larger than the split-K workspace "
                         f"({SPLITK_MAX_OUTPUT} elements); use one split")
    from kernelrl.gemm.kernels.triton_splitk import matmul_splitk

    tiles = -(-m // cfg.bm) * -(-n // cfg.bn)
    k_chunk = -(-(-(-k // cfg.splits)) // cfg.bk) * cfg.bk  # ceil(ceil(k / splits) / bk) * bk
    grid = (tiles, cfg.splits)
    reduce = cfg.splits > 1
    meta = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=8, REDUCE=reduce)
    constexprs = tuple(meta.values())
    jit = matmul_splitk[grid]
    raw_stream = torch._C._cuda_getCurrentRawStream
    deterministic = torch.are_deterministic_algorithms_enabled
    compiled = []
    scratch: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    if reduce and torch.cuda.is_available():
        SCRATCH.reserve(torch.cuda.current_device(), m * n, tiles)

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        if reduce and deterministic():
            torch.matmul(a, b, out=c)
            return
        dev = a.device.index
        stream = raw_stream(dev)
        if reduce:
            pair = scratch.get(stream)
            if pair is None:
                pair = scratch[stream] = SCRATCH.get(stream, dev, m * n, tiles)
            ws, cnt = pair
        else:
            ws = cnt = c  # unused without a reduction
        if compiled:
            kern = compiled[0]
            kern.run(grid[0], grid[1], 1, stream, kern.function, kern.packed_metadata, None, None, None,
                     a, b, c, ws, cnt, m, n, k, k_chunk, cfg.splits, *constexprs)
        else:
            compiled.append(jit(a, b, c, ws, cnt, m, n, k, k_chunk, cfg.splits, **meta,
                                num_warps=cfg.warps, num_stages=cfg.stages))

    return launch
