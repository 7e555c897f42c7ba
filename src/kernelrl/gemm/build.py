"""Build the native kernel libraries with nvcc: the CUTLASS SM90 configurations, the cluster split-K
configurations and the cuBLASLt binding; `build_all` (and running this module) also builds the dispatch's C++ hot
path (`fastpath`)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Callable

from kernelrl.gemm import fastpath
from kernelrl.gemm.native import CK_LIB_NAME, LIB_NAME, LT_LIB_NAME
from kernelrl.gemm.space import CLUSTERK_TILES, CUTLASS_CONFIGS, ClusterKConfig, CutlassConfig

SOURCE = Path(__file__).parent / "kernels" / "cutlass_sm90.cu"
DEFAULT_BUILD_DIR = Path(os.environ.get("KERNELRL_GEMM_BUILD", ".kernelrl-cache/gemm"))
LT_SOURCE = Path(__file__).parent / "kernels" / "cublaslt_binding.cu"
CK_SOURCE = Path(__file__).parent / "kernels" / "cluster_splitk.cu"
SM90_FLAGS = ["-std=c++17", "-O3", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-fPIC"]


def cutlass_include_dirs() -> list[Path]:
    """The CUTLASS/CuTe header folders of the `nvidia-cutlass` wheel (or $CUTLASS_PATH)."""
    roots = []
    if os.environ.get("CUTLASS_PATH"):
        roots.append(Path(os.environ["CUTLASS_PATH"]))
    import importlib.util

    # The nvidia-cutlass wheel ships the C++ headers inside its cutlass_library package (found, not imported).
    spec = importlib.util.find_spec("cutlass_library")
    if spec is not None and spec.submodule_search_locations:
        roots += [Path(p) / "source" for p in spec.submodule_search_locations]
    for root in roots:
        inc, util = root / "include", root / "tools" / "util" / "include"
        if (inc / "cute" / "tensor.hpp").is_file():
            return [inc, util]
    raise FileNotFoundError(
        "CUTLASS headers not found: `pip install nvidia-cutlass` (its cutlass_library package carries them) "
        "or set CUTLASS_PATH to a CUTLASS checkout")


def nvcc_command(cfg: CutlassConfig, includes: list[Path], bf16: bool = False) -> list[str]:
    """The nvcc command (up to `-o`) that compiles one CUTLASS configuration to an object file."""
    defs = [f"-D{k}={v}" for k, v in cfg.macros.items()]
    if bf16:
        defs = [d.replace(f"KR_NAME={cfg.symbol}", f"KR_NAME={cfg.symbol}_bf16") for d in defs]
    return ["nvcc", *SM90_FLAGS, "--expt-relaxed-constexpr", *[f"-I{p}" for p in includes],
            *defs, f"-DKR_BF16={int(bf16)}", "-c", str(SOURCE)]


def _compile_and_link(objects: dict[str, list[str] | Callable[[], list[str]]], source: Path, lib_name: str,
                      build_dir: Path, jobs: int | None, log) -> Path:
    """Compile every object (stem -> its nvcc command up to `-o`, or a function making it, called only if the
    object must be compiled) not yet built from this `source`, in parallel, and link them into
    `build_dir/lib_name`."""
    if shutil.which("nvcc") is None:
        raise FileNotFoundError("nvcc not found on PATH: the native kernel families need the CUDA toolkit")
    build_dir.mkdir(parents=True, exist_ok=True)
    digest = _digest(source)
    paths = {stem: build_dir / f"{stem}.{digest}.o" for stem in objects}

    def compile_one(stem: str) -> None:
        tmp = paths[stem].with_suffix(".tmp.o")
        cmd = objects[stem]() if callable(objects[stem]) else objects[stem]
        proc = subprocess.run([*cmd, "-o", str(tmp)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed for {stem}:\n{proc.stderr[-4000:]}")
        tmp.rename(paths[stem])
        log(f"built {paths[stem].name}")

    with ThreadPoolExecutor(jobs or max(1, os.cpu_count() or 1)) as pool:
        list(pool.map(compile_one, [stem for stem, path in paths.items() if not path.is_file()]))
    lib, manifest = build_dir / lib_name, manifest_path(build_dir, lib_name)
    manifest.unlink(missing_ok=True)  # no manifest while the library is being replaced
    subprocess.run(["nvcc", "-shared", "-o", str(lib), *map(str, paths.values())], check=True)
    manifest.write_text(json.dumps({"source": digest, "objects": sorted(paths)}))
    log(f"linked {lib}")
    return lib


def manifest_path(build_dir: Path, lib_name: str) -> Path:
    """What a library was linked from: its source's digest and its objects' stems (written after the link), so
    that the library alone (without its objects) can be judged current."""
    return build_dir / f"{lib_name}.objects"


def build(build_dir: Path = DEFAULT_BUILD_DIR, configs=CUTLASS_CONFIGS, jobs: int | None = None,
          bf16: bool = False, log=print) -> Path:
    """Compile the CUTLASS `configs` (skipping objects already built from the same source, which are linked as
    they are: no CUTLASS headers needed for those) and link the library."""
    def command(cfg: CutlassConfig, is_bf16: bool) -> list[str]:
        return nvcc_command(cfg, cutlass_include_dirs(), is_bf16)

    objects = {f"{cfg.symbol}{'_bf16' if is_bf16 else ''}": partial(command, cfg, is_bf16)
               for cfg in configs for is_bf16 in ((False, True) if bf16 else (False,))}
    return _compile_and_link(objects, SOURCE, LIB_NAME, build_dir, jobs, log)


def _linked_from_current(build_dir: Path, lib_name: str, source: Path, stems: list[str]) -> bool:
    """Whether `build_dir/lib_name` exists and its manifest says it was linked from the current `source`, with
    every object `stem` among its objects (the objects themselves need not be there)."""
    manifest = manifest_path(build_dir, lib_name)
    if not ((build_dir / lib_name).is_file() and manifest.is_file()):
        return False
    try:
        linked = json.loads(manifest.read_text())
    except ValueError:
        return False
    return linked.get("source") == _digest(source) and set(stems) <= set(linked.get("objects", ()))


def cutlass_is_current(build_dir: Path = DEFAULT_BUILD_DIR, configs=CUTLASS_CONFIGS, bf16: bool = False) -> bool:
    """Whether `build_dir` holds the CUTLASS library linked from the current source's objects (with the bf16
    kernels too, if `bf16`)."""
    stems = [f"{cfg.symbol}{suffix}" for cfg in configs for suffix in (("", "_bf16") if bf16 else ("",))]
    return _linked_from_current(build_dir, LIB_NAME, SOURCE, stems)


def clusterk_command(cfg: ClusterKConfig, macros: dict[str, int | str] | None = None) -> list[str]:
    """The nvcc command (up to `-o`) that compiles one cluster split-K configuration, fp16 and bf16; `macros`
    override or add to the configuration's (the probe's variants). The wgmma main loop takes its layouts, MMA
    atoms and tensor-map copies from CuTe (the `nvidia-cutlass` wheel's headers)."""
    cute = ["--expt-relaxed-constexpr", *[f"-I{p}" for p in cutlass_include_dirs()]] if cfg.wgmma else []
    defs = [f"-D{k}={v}" for k, v in {**cfg.macros, **(macros or {})}.items()]
    return ["nvcc", *SM90_FLAGS, *cute, *defs, "-c", str(CK_SOURCE)]


def build_clusterk(build_dir: Path = DEFAULT_BUILD_DIR, configs=CLUSTERK_TILES, jobs: int | None = None,
                   log=print) -> Path:
    """Compile the cluster split-K configurations and link their library (objects already built from the
    current source are linked as they are: no CUTLASS headers needed for those)."""
    return _compile_and_link({cfg.symbol: partial(clusterk_command, cfg) for cfg in configs}, CK_SOURCE,
                             CK_LIB_NAME, build_dir, jobs, log)


def clusterk_is_current(build_dir: Path = DEFAULT_BUILD_DIR, configs=CLUSTERK_TILES) -> bool:
    """Whether `build_dir` holds the cluster split-K library linked from the current source's objects."""
    return _linked_from_current(build_dir, CK_LIB_NAME, CK_SOURCE, [cfg.symbol for cfg in configs])


def cublas_dirs() -> tuple[Path, Path]:
    """(include, lib) folders of cuBLAS: $CUBLAS_PATH, the `nvidia-cublas` wheel, or the CUDA toolkit."""
    roots = [Path(os.environ["CUBLAS_PATH"])] if os.environ.get("CUBLAS_PATH") else []
    try:
        import nvidia  # namespace package of the nvidia-* wheels that torch depends on

        for base in nvidia.__path__:
            roots += [Path(base) / "cu13", Path(base) / "cublas"]
    except ImportError:
        pass
    roots.append(Path("/usr/local/cuda"))
    for root in roots:
        inc = root / "include"
        for lib in (root / "lib", root / "lib64"):
            if (inc / "cublasLt.h").is_file() and any(lib.glob("libcublasLt.so*")):
                return inc, lib
    raise FileNotFoundError("cublasLt.h not found: install the nvidia-cublas wheel or set CUBLAS_PATH")


def cublaslt_is_current(build_dir: Path = DEFAULT_BUILD_DIR) -> bool:
    """Whether `build_dir` holds the cuBLASLt binding built from the current source."""
    stamp = build_dir / f"{LT_LIB_NAME}.source"
    return (build_dir / LT_LIB_NAME).is_file() and stamp.is_file() and stamp.read_text() == _digest(LT_SOURCE)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:10]


def build_cublaslt(build_dir: Path = DEFAULT_BUILD_DIR, log=print) -> Path:
    """Compile the cuBLASLt binding unless `build_dir` holds one built from the current source; it links the
    libcublasLt that torch loads (same soname)."""
    lib = build_dir / LT_LIB_NAME
    if cublaslt_is_current(build_dir):
        return lib
    inc, lib_dir = cublas_dirs()
    build_dir.mkdir(parents=True, exist_ok=True)
    soname = sorted(p.name for p in lib_dir.glob("libcublasLt.so.*"))[0]
    subprocess.run(["nvcc", "-std=c++17", "-O2", "-Xcompiler=-fPIC", "-shared", f"-I{inc}", str(LT_SOURCE),
                    "-o", str(lib), f"-L{lib_dir}", f"-l:{soname}"], check=True)
    (build_dir / f"{LT_LIB_NAME}.source").write_text(_digest(LT_SOURCE))
    log(f"linked {lib}")
    return lib


def build_all(build_dir: Path = DEFAULT_BUILD_DIR, jobs: int | None = None, bf16: bool = False, log=print) -> None:
    """Build everything the dispatch loads: the C++ hot path, the cuBLASLt binding, cluster split-K and CUTLASS."""
    fastpath.build(build_dir, log=log)
    build_cublaslt(build_dir, log=log)
    build_clusterk(build_dir, jobs=jobs, log=log)
    build(build_dir, jobs=jobs, bf16=bf16, log=log)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kernelrl.gemm.build", description=build_all.__doc__)
    ap.add_argument("build_dir", nargs="?", type=Path, default=DEFAULT_BUILD_DIR,
                    help=f"where the libraries go (default {DEFAULT_BUILD_DIR})")
    ap.add_argument("--jobs", type=int, default=None, help="nvcc processes at once (default: the CPU count)")
    ap.add_argument("--bf16", action="store_true", help="CUTLASS kernels for bf16 as well as fp16")
    args = ap.parse_args()
    build_all(args.build_dir, jobs=args.jobs, bf16=args.bf16)
