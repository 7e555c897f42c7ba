"""benchmarks/gemm_decoder_bound.py: a decoder layer's speedup from its GEMMs' table times, on numbers made here."""
import csv
import json
import math
import subprocess
import sys

import pytest

from scripts import BENCHMARKS, load_script

bound = load_script("gemm_decoder_bound")
SCRIPT = BENCHMARKS / "gemm_decoder_bound.py"

# Llama-3.1-8B's linear products at one token: q and o 4096x4096, k and v 1024x4096, gate and up 14336x4096,
# down 4096x14336. k and v share a shape, so the table holds five rows for seven products.
PRODUCTS = {(4096, 4096): 2, (1024, 4096): 2, (14336, 4096): 2, (4096, 14336): 1}


def decoder(torch_us=100.0):
    return {"env": {"model": "Llama-3.1-8B", "dtype": "bf16", "device": "a GPU"},
            "rows": [{"mode": "decode", "tokens": 1, "torch_us": torch_us, "kernelrl_us": 90.0, "speedup": 1.1}]}


def table(torch_us=5.0, kernelrl_us=2.5, skip=()):
    return [{"m": "1", "n": str(n), "k": str(k), "dtype": "bf16", "torch_us": str(torch_us),
             "kernelrl_us": str(kernelrl_us)} for n, k in PRODUCTS if (n, k) not in skip]


def test_the_layer_speedup_follows_from_its_gemms_share_and_their_table_times():
    (row,) = bound.layer_gemms(decoder(), table())
    assert row["gemm_torch_us"] == pytest.approx(7 * 5.0) and row["gemm_kernelrl_us"] == pytest.approx(7 * 2.5)
    assert bound.layer_speedup(row, row["gemm_kernelrl_us"]) == pytest.approx(100 / (65 + 17.5))
    assert bound.layer_speedup(row, 0.0) == pytest.approx(100 / 65)
    # the roofline: the best rate of the table's rows; every row here at 2.5 us, the largest products set it
    assert row["gemm_kernelrl_us"] <= row["gemm_roofline_us"] < row["gemm_torch_us"]


def test_the_speedup_every_gemm_needs_for_the_goal_and_none_where_free_gemms_fall_short():
    rows = bound.layer_gemms(decoder(), table())
    assert bound.needed(rows, 1.2) == pytest.approx(35 / (100 / 1.2 - 65), rel=1e-9)
    assert bound.needed(rows, 1.6) == math.inf  # 100 / 65 = 1.54 with the GEMMs taking no time


def test_the_script_writes_its_table_and_refuses_a_csv_without_the_layers_shapes(tmp_path):
    dec = tmp_path / "gemm_decoder.json"
    dec.write_text(json.dumps(decoder()))

    def write(rows):
        path = tmp_path / "models.csv"
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        return path

    out = tmp_path / "bound.md"
    res = subprocess.run([sys.executable, str(SCRIPT), str(dec), str(write(table())), str(out), "--goal", "1.2"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    md = out.read_text()
    assert "| decode | 1 | 100.0 | 35% | 1.100 | 1.212 |" in md
    assert f"every GEMM would need to be {35 / (100 / 1.2 - 65):.3f}x faster than F.linear" in md
    res = subprocess.run([sys.executable, str(SCRIPT), str(dec), str(write(table(skip=[(1024, 4096)]))), str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "has no 1x1024x4096 row (k_proj)" in res.stderr.strip().splitlines()[-1]
