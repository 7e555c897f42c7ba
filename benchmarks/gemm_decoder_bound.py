"""How far `patch` can move a decoder layer: its measured speedup set beside what the model-shape table predicts
and what its GEMMs could give at most.

Usage: python benchmarks/gemm_decoder_bound.py DECODER_JSON MODELS_CSV OUT_MD [--goal 1.04]

DECODER_JSON is `benchmarks/gemm_decoder.py`'s output, MODELS_CSV the same GPU's `kernelrl gemm bench --shapes
models` CSV. Per row of the layer (decode: one token for each of `tokens` sequences; prefill: `tokens` tokens),
the layer's linear products are the CSV's rows (m = tokens, n = out_features, k = in_features, the layer's dtype),
each run once. Their torch.matmul (F.linear) times summed are the GEMMs' share of the layer's unpatched time; the
rest of the layer (norms, attention, activations) is taken as unchanged by `patch`. From that:
- predicted: the layer with each GEMM at the table's kernelrl time;
- at the roofline: each GEMM at the run's own best rate (`kernelrl.gemm.report.roofline`), a bound no kernel
  reaches on every shape;
- no GEMM time: the layer with its GEMMs free, the bound of any GEMM work;
- and the single speedup every GEMM would need for the layer's geomean to reach the goal.
Reads only committed results: no GPU.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from kernelrl.gemm.report import ceilings, geomean, read_rows, roofline  # noqa: E402
from kernelrl.gemm.shapes import MODELS  # noqa: E402


def layer_gemms(decoder: dict, rows: list[dict]) -> list[dict]:
    """Per row of the decoder run: the layer's times and its GEMMs' summed torch, kernelrl and roofline times."""
    env = decoder["env"]
    linears = MODELS[env["model"]].linears()
    rows = [r for r in rows if (r.get("dtype") or "fp16") == env["dtype"]]
    if not rows:
        raise ValueError(f"the models CSV has no {env['dtype']} rows")
    roof = roofline(rows)
    by_shape = {(int(r["m"]), int(r["n"]), int(r["k"])): (r, c) for r, c in zip(rows, ceilings(rows, roof))}
    out = []
    for d in decoder["rows"]:
        torch_us = kernelrl_us = roof_us = 0.0
        for name, (out_f, in_f) in linears.items():
            key = (d["tokens"], out_f, in_f)
            if key not in by_shape:
                raise ValueError(f"the models CSV has no {d['tokens']}x{out_f}x{in_f} row ({name})")
            r, ceiling = by_shape[key]
            torch_us += float(r["torch_us"])
            kernelrl_us += float(r["kernelrl_us"])
            roof_us += float(r["torch_us"]) / ceiling
        out.append({**d, "gemm_torch_us": torch_us, "gemm_kernelrl_us": kernelrl_us, "gemm_roofline_us": roof_us})
    return out


def layer_speedup(d: dict, gemm_us: float) -> float:
    """The layer's speedup were its GEMMs to take `gemm_us` instead of torch's, the rest as measured unpatched."""
    return d["torch_us"] / (d["torch_us"] - d["gemm_torch_us"] + gemm_us)


def needed(rows: list[dict], goal: float) -> float:
    """The one speedup every GEMM would need for the layers' geomean to reach `goal` (inf where even free GEMMs
    fall short)."""
    at = lambda s: geomean([layer_speedup(d, d["gemm_torch_us"] / s) for d in rows])
    if geomean([layer_speedup(d, 0.0) for d in rows]) <= goal:  # free GEMMs: no speedup of theirs is enough
        return math.inf
    lo, hi = 1.0, 2.0
    while at(hi) < goal:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid) < goal else (lo, mid)
    return hi


def markdown(decoder: dict, rows: list[dict], goal: float, csv_name: str) -> str:
    env = decoder["env"]
    cols = {"measured": [d["speedup"] for d in rows],
            "predicted": [layer_speedup(d, d["gemm_kernelrl_us"]) for d in rows],
            "roofline": [layer_speedup(d, d["gemm_roofline_us"]) for d in rows],
            "free": [layer_speedup(d, 0.0) for d in rows]}
    need = needed(rows, goal)
    lines = [f"# What {env['model']}'s decoder layer can gain from its GEMMs ({env['device']}, {env['dtype']})", "",
             f"`benchmarks/gemm_decoder_bound.py`: the layer's run (`gemm_decoder.json`) set beside the model-shape "
             f"table (`{csv_name}`): each row's linear products are the table's rows for that many tokens, and "
             f"everything else in the layer is taken as `patch` leaves it.", "",
             "| mode | tokens | layer µs (torch) | GEMMs' share | measured | predicted from the table | "
             "GEMMs at the roofline | GEMMs free |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, d in enumerate(rows):
        lines.append(f"| {d['mode']} | {d['tokens']} | {d['torch_us']:.1f} | "
                     f"{d['gemm_torch_us'] / d['torch_us']:.0%} | {cols['measured'][i]:.3f} | "
                     f"{cols['predicted'][i]:.3f} | {cols['roofline'][i]:.3f} | {cols['free'][i]:.2f} |")
    lines += [f"| geomean | | | | **{geomean(cols['measured']):.3f}** | {geomean(cols['predicted']):.3f} | "
              f"{geomean(cols['roofline']):.3f} | {geomean(cols['free']):.2f} |", "",
              f"Goal {goal}x on the layer: every GEMM would need to be "
              + (f"{need:.3f}x faster than F.linear (the table's geomean over these products is "
                 f"{geomean([d['gemm_torch_us'] / d['gemm_kernelrl_us'] for d in rows]):.3f}x, by time summed "
                 f"per row)" if math.isfinite(need) else "infinitely fast, and still the goal is out of reach")
              + f"; with every GEMM at the roofline the layer reads {geomean(cols['roofline']):.3f}x."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("decoder_json", type=Path)
    ap.add_argument("models_csv", type=Path)
    ap.add_argument("out_md", type=Path)
    ap.add_argument("--goal", type=float, default=1.04)
    a = ap.parse_args(argv)
    for p in (a.decoder_json, a.models_csv):
        if not p.is_file():
            ap.error(f"{p}: no such file")
    decoder = json.loads(a.decoder_json.read_text())
    try:
        rows = layer_gemms(decoder, read_rows(a.models_csv))
    except (ValueError, KeyError) as e:
        ap.error(f"{a.models_csv} does not cover {a.decoder_json}: {e}")
    a.out_md.write_text(markdown(decoder, rows, a.goal, a.models_csv.name))
    print(a.out_md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
