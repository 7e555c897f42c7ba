"""The dispatch's hot path in C++ (`fastpath.cpp`): built against the installed torch with torch's C++
extension tools (`kernelrl gemm build`, or `build()`), loaded by the dispatcher when present for this torch and
Python; without it the dispatcher answers every call in Python. `KERNELRL_GEMM_FASTPATH=0` turns it off."""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import sys
from pathlib import Path

import torch

from kernelrl.gemm.native import search_dirs

SOURCE = Path(__file__).with_name("fastpath.cpp")


def module_name() -> str:
    """The extension's name for this source, torch, Python and machine (a build for another never loads)."""
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(f"{torch.__version__}|{sys.version_info[:2]}|{platform.machine()}".encode())
    return f"kernelrl_gemm_fastpath_{h.hexdigest()[:12]}"


def build(build_dir: Path, log=print):
    """Compile the extension into `build_dir/fastpath` (needs a C++ compiler and ninja; about half a minute)
    and return the module."""
    from torch.utils.cpp_extension import load as load_extension

    out = Path(build_dir) / "fastpath"
    out.mkdir(parents=True, exist_ok=True)
    name = module_name()
    if name in sys.modules:  # built and loaded already (a module cannot be loaded twice)
        return sys.modules[name]
    mod = load_extension(name, [str(SOURCE)], build_directory=str(out), extra_cflags=["-O2"], verbose=False)
    sys.modules[name] = mod
    load.cache_clear()
    log(f"built {out / name}.so")
    return mod


@functools.lru_cache(maxsize=None)
def load():
    """The built extension for this torch, or None (not built, or turned off)."""
    if os.environ.get("KERNELRL_GEMM_FASTPATH", "1") == "0":
        return None
    name = module_name()
    for d in search_dirs():
        path = d / "fastpath" / f"{name}.so"
        if path.is_file():
            if name in sys.modules:
                return sys.modules[name]
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules[name] = mod
            return mod
    return None
