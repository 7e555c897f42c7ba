"""How far a task's fp32 output is from its exact (float64) result, draw of weights by draw: the reference built as
the evaluator builds it (`kernelrl.redteam.probe.Probe`, a Harness in this process) under init seeds 0..N-1, called
on one input draw, and its output's relative L2 distance from `Harness.exact_outputs` on the same inputs. Where it
is large, strict's exact-result test admits outputs that do not do the work (`exact.Accuracy.admits_zeros`; the
evaluator's `reference_inaccurate` warning).

Usage: python benchmarks/exact_gap.py TASK.py [--n 20] [--device cpu] [--out FILE]

Prints one line per seed and how many seeds leave a gap above 1% and above 10%.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from kernelrl.redteam.probe import Probe


def gaps(source: str, n: int, device: str) -> list[float]:
    """The fp32 output's relative L2 distance from the exact one under init seeds 0..n-1 (its first output)."""
    out = []
    for seed in range(n):
        probe = Probe({"role": "reference", "device": device, "seed": seed, "task_source": source,
                       "fixed_inputs": []}, {}, tempfile.mkdtemp())
        xs = probe.inputs(7)
        with torch.no_grad():
            got = probe.model(*xs)
        got = got[0] if isinstance(got, (tuple, list)) else got
        exact = probe.exact_outputs(xs)
        if isinstance(exact, str):
            raise SystemExit(f"seed {seed}: no exact result: {exact}")
        out.append(float((got.double() - exact[0]).norm() / exact[0].norm()))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", type=Path)
    ap.add_argument("--n", type=int, default=20, help="weight draws (init seeds 0..n-1)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    g = gaps(a.task.read_text(), a.n, a.device)
    lines = [f"{a.task.name} ({a.device}): fp32 output vs exact, relative L2, init seeds 0-{a.n - 1}"]
    lines += [f"  seed {s}: {v:.4g}" for s, v in enumerate(g)]
    lines.append(f"  above 1%: {sum(v > 0.01 for v in g)} of {a.n}; above 10%: {sum(v > 0.1 for v in g)} of {a.n}")
    text = "\n".join(lines) + "\n"
    a.out.write_text(text) if a.out else sys.stdout.write(text)


if __name__ == "__main__":
    main()
