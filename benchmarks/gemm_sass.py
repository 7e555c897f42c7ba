"""The machine code of the Triton GEMM kernels, without a GPU: compile every configuration of the tiled, split-K
and persistent TMA families for sm_90a and print one line per configuration with a hash of its SASS (register
choice and instruction order included; line info, labels and addresses left out). Two revisions whose lines
match run the same instructions, so a refactor of a kernel's source needs no new timing to show that it costs
nothing.

    python benchmarks/gemm_sass.py > before.txt   # at one revision
    python benchmarks/gemm_sass.py > after.txt    # at the other
    diff before.txt after.txt

Needs Triton (the `gemm` extra) and its bundled `cuobjdump`; compiles 72 kernels (about 75 s on two cores).
"""
from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")


def sass(cubin: bytes, cuobjdump: str) -> list[str]:
    """The instructions of a cubin, one per line, without their addresses and encodings."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    return [m.group(1) for m in map(_INSTRUCTION.search, out.splitlines()) if m]


def kernels():
    """(label, jit function, signature, constexprs, options) for every configuration of the three families."""
    from kernelrl.gemm import space
    from kernelrl.gemm.kernels.triton_splitk import matmul_splitk
    from kernelrl.gemm.kernels.triton_tiled import matmul_tiled
    from kernelrl.gemm.kernels.triton_tma import matmul_tma_persistent

    ptr = {n: "*fp16" for n in ("a_ptr", "b_ptr", "c_ptr")}
    ints = ("M", "N", "K")
    for c in space.TILED_CONFIGS:
        sig = {**ptr, **{n: "i32" for n in (*ints, "stride_am", "stride_bk", "stride_cm")}}
        for even in (True, False):
            const = dict(BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=8, EVEN_K=even)
            yield f"{c.name} EVEN_K={even}", matmul_tiled, sig, const, dict(num_warps=c.warps, num_stages=c.stages)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="only configurations whose label contains this")
    args = ap.parse_args()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cuobjdump = str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    target = GPUTarget("cuda", 90, 32)
    for label, fn, sig, const, opts in kernels():
        if args.only not in label:
            continue
        sig = {**sig, **{k: "constexpr" for k in const}}
        compiled = triton.compile(ASTSource(fn, sig, const), target=target, options=opts)
        lines = sass(compiled.asm["cubin"], cuobjdump)
        digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
        print(f"{label} {digest} {len(lines)}", flush=True)


if __name__ == "__main__":
    main()
