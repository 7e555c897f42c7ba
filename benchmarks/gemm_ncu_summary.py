"""One line per GEMM kernel launch in the Nsight Compute reports that benchmarks/gemm_ncu.sh writes (the checks'
reference, input and comparison kernels are skipped): duration, SM clock, tensor-pipe and unit throughputs, bytes
through L2 and DRAM, launch shape.

    python3 benchmarks/gemm_ncu_summary.py benchmarks/results/gemm_runs/ncu_headroom    (ncu_*.txt or .txt.gz)
"""
from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

# The GEMM kernels of every family (cuBLAS's, CUTLASS's, cluster split-K, Triton's), not the fp64 reference
GEMM = re.compile(r"^  (nvjet_|sm90_xmma_gemm_(?!f64)|void (cutlass::)?device_kernel|void <unnamed>::cluster_splitk|"
                  r"tiled_|matmul_|splitk_)")
FIELDS = {"Duration": "us", "SM Frequency": "GHz", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active":
          "tensor%", "Compute (SM) Throughput": "SM%", "L2 Cache Throughput": "L2%", "DRAM Throughput": "DRAM%",
          "lts__t_bytes.sum": "L2 MB", "dram__bytes_read.sum": "DRAM rd MB", "dram__bytes_write.sum": "DRAM wr MB",
          "Grid Size": "grid", "Block Size": "block", "Cluster Size": "cluster", "Registers Per Thread": "regs"}
SCALE = {"ms": 1e3, "us": 1.0, "ns": 1e-3, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
ROW = re.compile(r"^\s{4}(\S.*?)\s{2,}(?:(\S+)\s+)?([\d,.]+)$")


def short_name(name: str) -> str:
    if "device_kernel<" in name:  # CUTLASS (names in full, or shortened as ncu prints them under a name filter)
        sched = "pingpong" if "Pingpong" in name else "cooperative" if "Cooperative" in name else "basic"
        c = r"(?:cute::)?C<(\d+)>"
        dims = re.findall(c, name)[:6]
        epi = re.search(rf"CollectiveEpilogue<.*?, (?:cute::)?tuple<{c}, {c}, {c}>, (?:cute::)?tuple<{c}, {c}>", name)
        sub = f" epilogue {epi.group(4)}x{epi.group(5)}" if epi else ""
        return f"cutlass {sched} cluster {'x'.join(dims[:2])} tile {'x'.join(dims[3:6])}{sub}"
    return name.split(" (")[0].split("(")[0][:70]


def launches(path: Path) -> list[dict]:
    out: list[dict] = []
    cur: dict | None = None
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:
        lines = f.read().splitlines()
    for line in lines:
        if line.startswith("  ") and not line.startswith("   "):
            cur = {"kernel": short_name(line.strip())} if GEMM.match(line) else None
            if cur is not None:
                out.append(cur)
            continue
        m = ROW.match(line) if cur is not None else None
        if m and m.group(1) in FIELDS:
            unit, value = m.group(2) or "", float(m.group(3).replace(",", ""))
            cur[FIELDS[m.group(1)]] = value * SCALE.get(unit, 1.0)
    return out


def main() -> None:
    cols = list(FIELDS.values())
    for path in sorted(Path(sys.argv[1]).glob("ncu_*.txt*")):
        print(f"## {path.name[4:].split('.')[0]}")
        print("| kernel | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for row in launches(path):
            print(f"| {row['kernel']} | " + " | ".join(f"{row[c]:g}" if c in row else "" for c in cols) + " |")
        print()


if __name__ == "__main__":
    main()
