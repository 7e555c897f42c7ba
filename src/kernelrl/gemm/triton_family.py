"""The Triton families: launch the persistent TMA kernel, the tiled kernel or the split-K kernel for one
configuration with little Python overhead."""
from __future__ import annotations

import os
from dataclasses import replace

import torch

from kernelrl.gemm.shapes import Shape
from kernelrl.gemm.space import NUM_SMS, SPLITK_MAX_OUTPUT, SplitKConfig, TiledConfig, TritonConfig
from kernelrl.gemm.streams import PerStream

# Triton releases whose compiled-kernel launcher `_entry` knows (the C entry's arguments differ between releases);
# KERNELRL_GEMM_TRITON_DIRECT=0 keeps every launch on Triton's own `run`.
DIRECT_TRITON = ("3.6",) if os.environ.get("KERNELRL_GEMM_TRITON_DIRECT", "1") != "0" else ()
_TENSOR_MAPS = 64  # tensor maps kept per operand of a persistent TMA launcher (one per data pointer seen)


def _descriptor(t: torch.Tensor, block: list[int]):
    from triton.tools.tensor_descriptor import TensorDescriptor

    # Skip TensorDescriptor's per-call validation: the caller checked contiguity and 16-byte alignment.
    d = TensorDescriptor.__new__(TensorDescriptor)
    d.base, d.shape, d.strides, d.block_shape, d.padding = t, list(t.shape), list(t.stride()), block, "zero"
    return d


def _entry(kern, version: str | None = None):
    """(launch, head, tensor-descriptor metadata) for a compiled kernel: a call is
    `launch(grid_x, grid_y, grid_z, stream, *head, *kernel_args)`.

    With a Triton release in DIRECT_TRITON, `launch` is the C entry of Triton's generated launcher itself. That
    skips what `kern.run` does in Python on every call: two scratch-allocation closures and, for tensor
    descriptors, building their tensor maps. Only kernels that need no scratch memory take it. Otherwise `launch`
    is `kern.run`, with no metadata. A launcher built on it says which in its `direct` attribute (after its first
    call)."""
    run = kern.run
    head = (kern.function, kern.packed_metadata, None, None, None)
    if version is None:
        import triton

        version = triton.__version__
    if not version.startswith(tuple(v + "." for v in DIRECT_TRITON)):
        return run, head, None
    try:
        if run.global_scratch_size or run.profile_scratch_size:
            return run, head, None
        launch, closure, meta = run.launch, getattr(run.launch, "__closure__", None), ()
        if closure:  # wrapped to expand tensor descriptors: unwrap it
            cells = dict(zip(launch.__code__.co_freevars, (c.cell_contents for c in closure)))
            launch, meta = cells["launcher"], tuple(cells["tensordesc_meta"] or ())
            if not meta or any(m is None for m in meta):  # descriptors not lowered to tensor maps
                return run, head, None
        flags = (run.launch_cooperative_grid, run.launch_pdl, None, None)
    except (AttributeError, KeyError, TypeError):
        return run, head, None
    return launch, (kern.function, *flags, kern.packed_metadata, None, None, None), meta


def _keep(compiled: list, launch, kern) -> None:
    """After a launcher's first call: keep `kern`'s entry (`_entry`) in `compiled`, replaced in one step so that
    two first calls racing leave one entry, and say on `launch` whether it is Triton's C entry."""
    compiled[:] = _entry(kern)
    launch.direct = compiled[0] is not kern.run


def make_launcher(cfg: TritonConfig, m: int, n: int, k: int, acc_fp16: bool = False):
    """A function (a, b, c) -> None running the Triton kernel for an m x n x k problem into c.

    The first call goes through Triton's JIT (compiling if needed); later calls launch the compiled kernel
    directly (`_entry`), skipping the JIT's argument binding, and reuse each operand's tensor map while its data
    pointer recurs."""
    from kernelrl.gemm.kernels.triton_tma import matmul_tma_persistent

    tiles = -(-m // cfg.bm) * -(-n // cfg.bn)
    grid = (min(NUM_SMS, tiles),)
    jit = matmul_tma_persistent[grid]
    meta = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, NUM_SMS=NUM_SMS,
                WARP_SPECIALIZE=cfg.ws, FLATTEN=False, ACC_FP16=acc_fp16)
    constexprs = tuple(meta.values())  # in the kernel's parameter order, after the runtime arguments
    blocks = ([cfg.bm, cfg.bk], [cfg.bk, cfg.bn], [cfg.bm, cfg.bn])
    raw_stream = torch._C._cuda_getCurrentRawStream
    compiled = []
    maps: tuple[dict, dict, dict] = ({}, {}, {})  # per operand: data pointer -> its expanded tensor-map arguments

    def expanded(i: int, t: torch.Tensor, tensordesc_meta) -> list:
        # A tensor map fixes the base address, sizes, strides and box; in this launcher only the address varies.
        hit = maps[i].get(t.data_ptr())
        if hit is None:
            from triton.backends.nvidia.driver import make_tensordesc_arg

            if len(maps[i]) >= _TENSOR_MAPS:
                maps[i].clear()
            hit = maps[i][t.data_ptr()] = make_tensordesc_arg(_descriptor(t, blocks[i]), tensordesc_meta[i])
        return hit

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        if compiled:
            entry, head, tmeta = compiled
            stream = raw_stream(a.device.index)
            if tmeta:
                entry(grid[0], 1, 1, stream, *head, *expanded(0, a, tmeta), *expanded(1, b, tmeta),
                      *expanded(2, c, tmeta), m, n, k, *constexprs)
            else:
                entry(grid[0], 1, 1, stream, *head, _descriptor(a, blocks[0]), _descriptor(b, blocks[1]),
                      _descriptor(c, blocks[2]), m, n, k, *constexprs)
        else:
            kern = jit(_descriptor(a, blocks[0]), _descriptor(b, blocks[1]), _descriptor(c, blocks[2]), m, n, k,
                       **meta, num_warps=cfg.warps, num_stages=cfg.stages)
            _keep(compiled, launch, kern)

    return launch


def make_tiled_launcher(cfg: TiledConfig, m: int, n: int, k: int):
    """A function (a, b, c) -> None running the Triton tiled kernel for an m x n x k problem into c (row-major,
    contiguous). Like `make_launcher`, the first call compiles and later calls launch the compiled kernel
    directly. A fixed configuration (`TiledConfig.fixed`) is compiled for this shape, which its tiles must cover."""
    if cfg.fixed and not cfg.covers(Shape(m, n, k)):
        raise ValueError(f"{cfg.name} is compiled for shapes its {cfg.bm}x{cfg.bn}x{cfg.bk} tiles cover exactly; "
                         f"{m}x{n}x{k} is not one: use {replace(cfg, fixed=False).name}")
    from kernelrl.gemm.kernels.triton_tiled import matmul_tiled, matmul_tiled_fixed

    grid = (-(-m // cfg.bm) * -(-n // cfg.bn),)
    # the launch passes every argument, constexprs too (Triton's launcher skips them): for the fixed kernel the
    # sizes and strides below are its constexprs
    meta = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=8, EVEN_K=k % cfg.bk == 0,
                EVEN_MN=m % cfg.bm == 0 and n % cfg.bn == 0)
    constexprs = tuple(meta.values())
    jit = (matmul_tiled_fixed if cfg.fixed else matmul_tiled)[grid]
    raw_stream = torch._C._cuda_getCurrentRawStream
    compiled = []

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        if compiled:
            entry, head, _ = compiled
            entry(grid[0], 1, 1, raw_stream(a.device.index), *head, a, b, c, m, n, k, k, n, n, *constexprs)
        else:
            kern = jit(a, b, c, m, n, k, k, n, n, **meta, num_warps=cfg.warps, num_stages=cfg.stages)
            _keep(compiled, launch, kern)

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
            entry, head, _ = compiled
            entry(grid[0], grid[1], 1, stream, *head, a, b, c, ws, cnt, m, n, k, k_chunk, cfg.splits, *constexprs)
        else:
            kern = jit(a, b, c, ws, cnt, m, n, k, k_chunk, cfg.splits, **meta, num_warps=cfg.warps,
                       num_stages=cfg.stages)
            _keep(compiled, launch, kern)

    return launch
