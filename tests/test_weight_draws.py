"""benchmarks/weight_draws.py: how many weight draws make a task's output ignore its input, on a fixture task."""
from pathlib import Path

import torch

from scripts import load_script

weight_draws = load_script("weight_draws")
TASK = Path(__file__).parent / "data" / "redteam" / "weighted_clamp.py"


def test_the_draws_whose_bias_every_value_passes_are_counted_with_their_constant(tmp_path):
    # sigmoid(x) - bias clamped to [-1, 1]: 1 everywhere where the bias is at most -1, -1 where it is at least 2
    def bias(seed):
        torch.manual_seed(seed)
        return float(torch.randn(1) * 4)

    biases = [bias(s) for s in range(60)]
    ones, minus = sum(b <= -1 for b in biases), sum(b >= 2 for b in biases)
    assert ones and minus and not any(-1 < b < -0.9 or 1.9 < b < 2 for b in biases)  # none where the edge is in doubt
    out = tmp_path / "draws.txt"
    weight_draws.main([str(TASK), "--n", "60", "--batch-size", "8", "--out", str(out)])
    lines = out.read_text().splitlines()
    assert lines[0] == f"weighted_clamp.py: {ones + minus} of 60 weight draws give the same output for two input " \
                       f"draws (batch_size 8)"
    assert lines[1].startswith(f"  output -1: {minus} draws") and lines[2].startswith(f"  output 1: {ones} draws")
