"""The CUTLASS SM90 family through its C ABI: can-implement checks, workspace sizes and launches."""
from __future__ import annotations

import ctypes

import torch

from kernelrl.gemm.native import cutlass_lib
from kernelrl.gemm.space import CUTLASS_CONFIGS, CutlassVariant
from kernelrl.gemm.streams import plan_launcher

_vp, _i, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t


def _fns(variant: CutlassVariant, dtype: torch.dtype):
    lib = cutlass_lib()
    sym = variant.config.symbol + ("_bf16" if dtype == torch.bfloat16 else "")
    try:
        run = getattr(lib, f"{sym}_run")
        ws = getattr(lib, f"{sym}_workspace")
        can = getattr(lib, f"{sym}_can_implement")
    except AttributeError as e:
        raise KeyError(f"CUTLASS configuration {sym} is not in the built library: rebuild it") from e
    run.argtypes = [_vp, _vp, _vp, _i, _i, _i, _i, _i, _i, _i, _vp, _sz, _vp]
    plan = getattr(lib, f"{sym}_plan")
    plan.argtypes = [_i] * 7 + [_vp, _sz]
    plan.restype = _vp
    getattr(lib, f"{sym}_plan_run").argtypes = [_vp] * 5
    free = getattr(lib, f"{sym}_plan_free")
    free.argtypes, free.restype = [_vp], None
    ws.argtypes = [_i] * 7
    ws.restype = _sz
    can.argtypes = [_i] * 7
    return run, ws, can


def built_for(dtype: torch.dtype) -> bool:
    """Whether the built library holds every configuration's kernels for `dtype` (bf16 ones are built only on
    request: `kernelrl gemm build --bf16`); raises FileNotFoundError where there is no library."""
    lib = cutlass_lib()
    suffix = "_bf16" if dtype == torch.bfloat16 else ""
    return all(hasattr(lib, f"{c.symbol}{suffix}_plan") for c in CUTLASS_CONFIGS)


def _rt(v: CutlassVariant) -> tuple[int, int, int, int]:
    return v.splits, v.raster, v.swizzle, v.decomposition


def workspace_bytes(variant: CutlassVariant, m: int, n: int, k: int, dtype=torch.float16) -> int:
    """Workspace the variant needs for the problem, bytes."""
    return int(_fns(variant, dtype)[1](m, n, k, *_rt(variant)))


def can_implement(variant: CutlassVariant, m: int, n: int, k: int, dtype=torch.float16) -> bool:
    return _fns(variant, dtype)[2](m, n, k, *_rt(variant)) == 0


def make_launcher(variant: CutlassVariant, m: int, n: int, k: int, dtype=torch.float16,
                  device_index: int | None = None):
    """A function (a, b, c) -> None that runs the variant on an m x n x k problem into c; each CUDA stream gets
    its own workspace (`streams.WORKSPACES`)."""
    _fns(variant, dtype)
    lib = cutlass_lib()
    sym = variant.config.symbol + ("_bf16" if dtype == torch.bfloat16 else "")
    make = getattr(lib, f"{sym}_plan")

    def make_plan(ws: torch.Tensor) -> int:
        plan = make(m, n, k, *_rt(variant), ws.data_ptr(), ws.numel())
        if not plan:
            raise ValueError(f"CUTLASS {variant.name} cannot run {m}x{n}x{k} within the workspace cap")
        return plan

    dev = torch.cuda.current_device() if device_index is None else device_index
    return plan_launcher(make_plan, getattr(lib, f"{sym}_plan_run"), getattr(lib, f"{sym}_plan_free"), dev,
                         f"CUTLASS {variant.name} for {m}x{n}x{k}")
