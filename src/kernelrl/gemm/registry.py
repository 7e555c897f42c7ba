"""Kernel names to launchers: every family's kernel is a function (a, b, c) -> None writing A @ B into c.

Names: `torch`; `cublaslt` (cuBLASLt's own default, no algorithm given); `cublaslt:<64-byte algo hex>`;
`triton:<config>` (Triton persistent TMA); `tiled:<config>` (Triton tiled); `splitk:<tile>/k<splits>` (Triton
split-K); `clusterk:<tile>[_wg|_tma]/c<splits>[g<groups>]` (CUDA cluster split-K: mma.sync, or wgmma fed by
cp.async or by the bulk tensor copy engine; `groups` clusters per output tile); `cutlass:<config>/<run-time
arguments>`.
"""
from __future__ import annotations

import torch

from kernelrl.gemm.space import ClusterKConfig, CutlassVariant, SplitKConfig, TiledConfig, TritonConfig

FAMILIES = ("torch", "cublaslt", "triton", "tiled", "splitk", "clusterk", "cutlass")


def family(name: str) -> str:
    fam = name.split(":", 1)[0]
    if fam not in FAMILIES:
        raise ValueError(f"unknown kernel family in {name!r}: one of {FAMILIES}")
    return fam


def _torch_out(a, b, c):
    torch.matmul(a, b, out=c)


def make_launcher(name: str, m: int, n: int, k: int, dtype=torch.float16, device_index: int | None = None):
    """The launcher of kernel `name` for an m x n x k problem of `dtype`."""
    fam = family(name)
    if fam == "torch":
        return _torch_out
    dev = torch.cuda.current_device() if device_index is None else device_index
    if fam == "cublaslt":
        from kernelrl.gemm import cublaslt

        algo = cublaslt.LtAlgo.from_name(name) if ":" in name else None
        return cublaslt.make_launcher(algo, m, n, k, dtype, dev)
    if fam == "triton":
        from kernelrl.gemm import triton_family

        return triton_family.make_launcher(TritonConfig.parse(name), m, n, k)
    if fam == "tiled":
        from kernelrl.gemm import triton_family

        return triton_family.make_tiled_launcher(TiledConfig.parse(name), m, n, k)
    if fam == "splitk":
        from kernelrl.gemm import triton_family

        return triton_family.make_splitk_launcher(SplitKConfig.parse(name), m, n, k)
    if fam == "clusterk":
        from kernelrl.gemm import clusterk

        return clusterk.make_launcher(ClusterKConfig.parse(name), m, n, k, dtype, dev)
    from kernelrl.gemm import cutlass

    return cutlass.make_launcher(CutlassVariant.parse(name), m, n, k, dtype, dev)
