"""The Triton family: launches the persistent TMA kernel for one configuration with little Python overhead."""
from __future__ import annotations

import torch

from kernelrl.gemm.space import NUM_SMS, TritonConfig


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
