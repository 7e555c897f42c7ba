"""The machine code of the GEMM kernels, without a GPU: compile every configuration of the Triton tiled, split-K
and persistent TMA families for sm_90a (or every cluster split-K configuration with nvcc) and give one line per
kernel with a hash of its SASS (register choice and instruction order included; line info, labels and addresses
left out). Two revisions whose lines match run the same instructions, so a refactor of a kernel's source needs no
new timing to show that it costs nothing (`kernelrl gemm sass`)."""
from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterator

_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")
# the anonymous namespace's mangled name, which carries a hash of the source file's path
_ANON = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")


def instructions(listing: str) -> list[str]:
    """The instructions of a `cuobjdump -sass` listing, one per line, without their addresses and encodings."""
    return [m.group(1) for m in map(_INSTRUCTION.search, listing.splitlines()) if m]


def functions(listing: str) -> dict[str, list[str]]:
    """Each kernel of a `cuobjdump -sass` listing (its name without the anonymous namespace's file hash) and its
    instructions."""
    found: dict[str, list[str]] = {}
    name = ""
    for line in listing.splitlines():
        if "Function :" in line:
            name = _ANON.sub("", line.split("Function :")[1].strip())
            found[name] = []
        elif (m := _INSTRUCTION.search(line)) and name:
            found[name].append(m.group(1))
    return found


def digest(lines: list[str]) -> str:
    """The hash that stands for a kernel's instructions (16 hex digits)."""
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def sass(cubin: bytes, cuobjdump: str) -> list[str]:
    """The instructions of a cubin, one per line, without their addresses and encodings."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    return instructions(out)


def bundled_cuobjdump() -> str:
    """The cuobjdump that Triton's wheel bundles."""
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


# the shape the tiled kernel's fixed form is compiled for here: every tiled configuration covers it
FIXED_SHAPE = (512, 512, 1024)


def kernels():
    """(label, jit function, signature, constexprs, options) for every configuration of the three families. A tiled
    configuration is compiled with and without K masks, each with and without its edge handling in M and N (the
    form with it keeps the plain label, so listings of revisions before `EVEN_MN` compare line for line), and in its fixed form for FIXED_SHAPE."""
    from kernelrl.gemm import space
    from kernelrl.gemm.kernels.triton_splitk import matmul_splitk
    from kernelrl.gemm.kernels.triton_tiled import matmul_tiled, matmul_tiled_fixed
    from kernelrl.gemm.kernels.triton_tma import matmul_tma_persistent

    ptr = {n: "*fp16" for n in ("a_ptr", "b_ptr", "c_ptr")}
    ints = ("M", "N", "K")
    for c in space.TILED_CONFIGS:
        sig = {**ptr, **{n: "i32" for n in (*ints, "stride_am", "stride_bk", "stride_cm")}}
        opts = dict(num_warps=c.warps, num_stages=c.stages)
        for even in (True, False):
            for even_mn in (False, True):
                const = dict(BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=8, EVEN_K=even, EVEN_MN=even_mn)
                yield f"{c.name} EVEN_K={even}{' EVEN_MN' if even_mn else ''}", matmul_tiled, sig, const, opts
        m, n, k = FIXED_SHAPE
        const = dict(M=m, N=n, K=k, stride_am=k, stride_bk=n, stride_cm=n, BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=8,
                     EVEN_K=True, EVEN_MN=True)
        yield f"{c.name}_fixed {m}x{n}x{k}", matmul_tiled_fixed, ptr, const, opts
    for c in space.SPLITK_TILES:
        sig = {**ptr, "ws_ptr": "*fp32", "cnt_ptr": "*i32", **{n: "i32" for n in (*ints, "k_chunk", "splits")}}
        for reduce in (True, False):
            const = dict(BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=8, REDUCE=reduce)
            yield (f"{c.name.split('/')[0]} REDUCE={reduce}", matmul_splitk, sig, const,
                   dict(num_warps=c.warps, num_stages=c.stages))
    for c in space.TRITON_CONFIGS:
        sig = {"a_desc": f"tensordesc<fp16[{c.bm},{c.bk}]>", "b_desc": f"tensordesc<fp16[{c.bk},{c.bn}]>",
               "c_desc": f"tensordesc<fp16[{c.bm},{c.bn}]>", **{n: "i32" for n in ints}}
        const = dict(BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=c.group_m, NUM_SMS=space.NUM_SMS, WARP_SPECIALIZE=c.ws,
                     FLATTEN=False, ACC_FP16=False)
        yield c.name, matmul_tma_persistent, sig, const, dict(num_warps=c.warps, num_stages=c.stages)


def clusterk_lines(source: Path, build_dir: Path, cuobjdump: str, only: str = "",
                   log: Callable[[str], None] = print) -> Iterator[tuple[str, str, int]]:
    """(symbol, SASS hash, instruction count) of every cluster split-K configuration compiled from `source`."""
    from kernelrl.gemm import build as b
    from kernelrl.gemm.space import CLUSTERK_TILES

    configs = [c for c in CLUSTERK_TILES if only in c.symbol]

    def command(cfg) -> list[str]:
        cmd = b.clusterk_command(cfg)
        return [str(source.resolve()) if a == str(b.CK_SOURCE) else a for a in cmd]

    b._compile_and_link({c.symbol: (lambda c=c: command(c)) for c in configs}, source, "libsass_clusterk.so",
                        build_dir, None, log)
    source_digest = b._digest(source)
    for c in configs:
        out = subprocess.run([cuobjdump, "-sass", str(build_dir / f"{c.symbol}.{source_digest}.o")],
                             capture_output=True, text=True, check=True).stdout
        for name, lines in sorted(functions(out).items()):
            yield f"{c.symbol} {name}", digest(lines), len(lines)


def triton_lines(only: str = "", cuobjdump: str = "") -> Iterator[tuple[str, str, int]]:
    """(label, SASS hash, instruction count) of every Triton configuration whose label contains `only`, compiled for
    sm_90a (needs Triton; no GPU)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    tool = cuobjdump or bundled_cuobjdump()
    target = GPUTarget("cuda", 90, 32)
    for label, fn, sig, const, opts in kernels():
        if only not in label:
            continue
        sig = {**sig, **{k: "constexpr" for k in const}}
        compiled = triton.compile(ASTSource(fn, sig, const), target=target, options=opts)
        lines = sass(compiled.asm["cubin"], tool)
        yield label, digest(lines), len(lines)
