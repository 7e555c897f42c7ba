"""The Triton families: launch the persistent TMA kernel, the tiled kernel or the split-K kernel for one
configuration with little Python overhead."""
from __future__ import annotations

import torch

from kernelrl.gemm.space import NUM_SMS, SPLITK_MAX_OUTPUT, SplitKConfig, TiledConfig, TritonConfig
from kernelrl.gemm.streams import PerStream


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


def make_tiled_launcher(cfg: TiledConfig, m: int, n: int, k: int):
    """A function (a, b, c) -> None running the Triton tiled kernel for an m x n x k problem into c (row-major,
    contiguous). Like `make_launcher`, the first call compiles and later calls launch the compiled kernel
    directly."""
    from kernelrl.gemm.kernels.triton_tiled import matmul_tiled

    grid = (-(-m // cfg.bm) * -(-n // cfg.bn),)
    meta = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=8, EVEN_K=k % cfg.bk == 0)
    constexprs = tuple(meta.values())
    jit = matmul_tiled[grid]
    raw_stream = torch._C._cuda_getCurrentRawStream
    compiled = []

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        if compiled:
            kern = compiled[0]
            kern.run(grid[0], 1, 1, raw_stream(a.device.index), kern.function, kern.packed_metadata, None, None,
                     None, a, b, c, m, n, k, k, n, n, *constexprs)
        else:
            compiled.append(jit(a, b, c, m, n, k, k, n, n, **meta, num_warps=cfg.warps, num_stages=cfg.stages))

    return launch


def _zeroed_pair(device: int, sizes: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.zeros(sizes[0], dtype=torch.float32, device=f"cuda:{device}"),
            torch.zeros(sizes[1], dtype=torch.int32, device=f"cuda:{device}"))


# The split-K kernels' fp32 workspaces and tile counters, one pair per CUDA stream. The kernel leaves both at
# zero when it finishes, so a pair is zeroed once, when it is made; a stream first seen during graph capture
# takes a spare zeroed ahead of time, so that no graph depends on another graph's zeroing.
SCRATCH = PerStream(_zeroed_pair)


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
        SCRATCH.reserve(torch.cuda.current_device(), (m * n, tiles))

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        if reduce and deterministic():
            torch.matmul(a, b, out=c)
            return
        dev = a.device.index
        stream = raw_stream(dev)
        if reduce:
            pair = scratch.get(stream)
            if pair is None:
                pair = scratch[stream] = SCRATCH.get(stream, dev, (m * n, tiles))
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
