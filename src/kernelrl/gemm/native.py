"""Find and load the native kernel libraries (compiled by `kernelrl.gemm.build`) through ctypes: their file names,
the folders searched for them, and the loaded libraries."""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

LIB_NAME = "libkernelrl_cutlass_sm90.so"
LT_LIB_NAME = "libkernelrl_cublaslt.so"
CK_LIB_NAME = "libkernelrl_clusterk.so"


def search_dirs() -> list[Path]:
    """Folders searched for the libraries: $KERNELRL_GEMM_BUILD, ./.kernelrl-cache/gemm, ~/.cache/kernelrl/gemm."""
    dirs = []
    if os.environ.get("KERNELRL_GEMM_BUILD"):
        dirs.append(Path(os.environ["KERNELRL_GEMM_BUILD"]))
    dirs += [Path.cwd() / ".kernelrl-cache" / "gemm", Path.home() / ".cache" / "kernelrl" / "gemm"]
    return dirs


def find_library(name: str) -> Path | None:
    for d in search_dirs():
        if (d / name).is_file():
            return d / name
    return None


@functools.lru_cache(maxsize=None)
def load(name: str) -> ctypes.CDLL:
    """Load a built library; raises FileNotFoundError saying how to build it when it is missing."""
    path = find_library(name)
    if path is None:
        raise FileNotFoundError(
            f"{name} not found in {[str(d) for d in search_dirs()]}: build it with "
            "`python -m kernelrl.gemm.build` (needs nvcc and the nvidia-cutlass wheel) or set KERNELRL_GEMM_BUILD")
    if name == LT_LIB_NAME:
        import torch

        # Load torch's cuBLASLt first so the binding binds to the very library torch.matmul uses.
        if torch.cuda.is_available():
            torch.matmul(torch.ones(8, 8, device="cuda", dtype=torch.float16),
                         torch.ones(8, 8, device="cuda", dtype=torch.float16))
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def cutlass_lib() -> ctypes.CDLL:
    return load(LIB_NAME)


def cublaslt_lib() -> ctypes.CDLL:
    return load(LT_LIB_NAME)


def clusterk_lib() -> ctypes.CDLL:
    return load(CK_LIB_NAME)
