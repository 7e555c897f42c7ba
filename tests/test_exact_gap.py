"""benchmarks/exact_gap.py: how far a task's fp32 output is from its exact result, seed by seed, on a fixture task."""
from pathlib import Path

import torch

from scripts import load_script

exact_gap = load_script("exact_gap")
TASK = Path(__file__).parent / "data" / "redteam" / "chaotic.py"


def test_the_seeds_whose_gain_makes_the_fp32_output_chaotic_are_counted(tmp_path):
    # sin of a row sum times 10^(4|g|): where |g| is large the fp32 sum's rounding is a phase error of order one
    def gain(seed):
        torch.manual_seed(seed)
        return abs(float(torch.randn(1)))

    gains = [gain(s) for s in range(12)]
    out = tmp_path / "gap.txt"
    exact_gap.main([str(TASK), "--n", "12", "--out", str(out)])
    lines = out.read_text().splitlines()
    gaps = [float(line.split(": ")[1]) for line in lines[1:13]]
    assert all(v > 0.1 for v, g in zip(gaps, gains) if g > 1.5) and any(g > 1.5 for g in gains)
    assert all(v < 1e-3 for v, g in zip(gaps, gains) if g < 0.5) and any(g < 0.5 for g in gains)
    assert lines[-1] == f"  above 1%: {sum(v > 0.01 for v in gaps)} of 12; above 10%: {sum(v > 0.1 for v in gaps)} of 12"
