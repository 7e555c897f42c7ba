"""A Llama-style decoder layer with `kernelrl.gemm.patch` against the same layer without, end to end.

Usage: python benchmarks/gemm_decoder.py OUT_DIR [--model Llama-3.1-8B] [--decode 1,8,16,32,64]
                                         [--prefill 512,1024,2048,4096,8192] [--dtype bf16] [--device cuda]

The layer: RMSNorm, GQA attention through `F.scaled_dot_product_attention` (decode: every sequence's one new token
against a `--context`-token KV cache; prefill: one causal sequence), RMSNorm, SwiGLU MLP; widths from
`kernelrl.gemm.shapes.MODELS`. Two copies of one layer, one patched, are each captured in a CUDA graph and
replayed in alternating rounds (device time by CUDA events around each replay, the L2 flushed before each, medians
over all rounds). Errors are against the layer in float64: the patched layer's must be within 2x torch's.
`--device cpu --tiny` is a smoke run at toy widths (wall time, no graphs). Writes OUT_DIR/gemm_decoder.json and
OUT_DIR/gemm_decoder.md.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from kernelrl.gemm import patch  # noqa: E402
from kernelrl.gemm.dispatch import default_dispatcher  # noqa: E402
from kernelrl.gemm.shapes import MODELS, ModelConfig  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(v + self.eps)).to(x.dtype) * self.weight


class DecoderLayer(nn.Module):
    """One Llama-style decoder layer; `forward(x, k_cache, v_cache)` with x (batch, tokens, hidden)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        lin = cfg.linears()
        for name, (out_f, in_f) in lin.items():
            setattr(self, name, nn.Linear(in_f, out_f, bias=False))
        self.input_norm, self.post_norm = RMSNorm(cfg.hidden), RMSNorm(cfg.hidden)

    def forward(self, x, k_cache=None, v_cache=None):
        c = self.cfg
        b, t, _ = x.shape
        h = self.input_norm(x)
        q = self.q_proj(h).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        if k_cache is not None:  # decode: the new token attends to the cache and to itself
            k, v = torch.cat([k_cache, k], 2), torch.cat([v_cache, v], 2)
        k = k.repeat_interleave(c.heads // c.kv_heads, 1)
        v = v.repeat_interleave(c.heads // c.kv_heads, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=k_cache is None)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def inputs(cfg: ModelConfig, mode: str, tokens: int, context: int, dtype, device):
    g = torch.Generator(device=device).manual_seed(tokens)
    if mode == "decode":
        x = torch.randn(tokens, 1, cfg.hidden, generator=g, device=device, dtype=dtype)
        kv = [torch.randn(tokens, cfg.kv_heads, context, cfg.head_dim, generator=g, device=device, dtype=dtype)
              for _ in range(2)]
        return [x, *kv]
    return [torch.randn(1, tokens, cfg.hidden, generator=g, device=device, dtype=dtype)]


def rel_err(out, exact) -> float:
    return float((out.double() - exact).norm() / exact.norm())


def time_graphs(layers, xs, rounds: int, replays: int, flush) -> list[list[float]]:
    """Per layer, device time (µs) of every replay of its CUDA graph, rounds alternating between the layers."""
    graphs = []
    for layer in layers:
        with torch.no_grad():
            for _ in range(3):  # warm up: launchers built, caches filled
                layer(*xs)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                layer(*xs)
        graphs.append(g)
    times = [[] for _ in layers]
    for r in range(rounds):
        order = range(len(layers)) if r % 2 == 0 else reversed(range(len(layers)))
        for i in order:
            for _ in range(replays):
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graphs[i].replay()
                end.record()
                end.synchronize()
                times[i].append(start.elapsed_time(end) * 1e3)
    return times


def time_wall(layers, xs, rounds: int, replays: int) -> list[list[float]]:
    times = [[] for _ in layers]
    with torch.no_grad():
        for r in range(rounds):
            for i, layer in enumerate(layers):
                for _ in range(replays):
                    t0 = time.perf_counter()
                    layer(*xs)
                    times[i].append((time.perf_counter() - t0) * 1e6)
    return times


def run(args) -> list[dict]:
    dtype, device = DTYPES[args.dtype], torch.device(args.device)
    cfg = ModelConfig(64, 4, 2, 16, 128) if args.tiny else MODELS[args.model]
    torch.manual_seed(0)
    base = DecoderLayer(cfg).to(device=device, dtype=dtype).eval()
    exact_layer = copy.deepcopy(base).double()
    patched = copy.deepcopy(base)
    names = patch(patched)
    flush = torch.empty(64 << 20, device=device) if device.type == "cuda" else None
    rows = []
    plan = [("decode", t) for t in args.decode] + [("prefill", t) for t in args.prefill]
    for mode, tokens in plan:
        xs = inputs(cfg, mode, tokens, args.context, dtype, device)
        with torch.no_grad():
            exact = exact_layer(*[x.double() for x in xs])
            errs = [rel_err(layer(*xs), exact) for layer in (base, patched)]
        times = (time_graphs([base, patched], xs, args.rounds, args.replays, flush) if device.type == "cuda"
                 else time_wall([base, patched], xs, args.rounds, args.replays))
        torch_us, kernelrl_us = (statistics.median(t) for t in times)
        m = tokens  # rows of every linear layer's product: one token per sequence (decode) or the sequence
        kernels = {n: default_dispatcher().kernel_for(m, *cfg.linears()[n], dtype) for n in cfg.linears()}
        rows.append({"mode": mode, "tokens": tokens, "torch_us": torch_us, "kernelrl_us": kernelrl_us,
                     "speedup": torch_us / kernelrl_us, "torch_rel_err": errs[0], "kernelrl_rel_err": errs[1],
                     "within_2x_torch_error": errs[1] <= 2 * errs[0] + 1e-7, "kernels": kernels})
        print(json.dumps(rows[-1]), flush=True)
    return rows, names, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="Llama-3.1-8B", choices=sorted(MODELS))
    ap.add_argument("--decode", default="1,8,16,32,64")
    ap.add_argument("--prefill", default="512,1024,2048,4096,8192")
    ap.add_argument("--context", type=int, default=2048, help="KV-cache tokens per sequence when decoding")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--tiny", action="store_true", help="toy widths: a smoke run")
    args = ap.parse_args()
    args.decode = [int(t) for t in args.decode.split(",") if t]
    args.prefill = [int(t) for t in args.prefill.split(",") if t]
    args.out.mkdir(parents=True, exist_ok=True)
    rows, names, cfg = run(args)
    env = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
           "torch": torch.__version__, "model": "tiny" if args.tiny else args.model, "dtype": args.dtype,
           "patched_layers": names, "date": time.strftime("%Y-%m-%d")}
    (args.out / "gemm_decoder.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    geo = math.exp(statistics.fmean(math.log(r["speedup"]) for r in rows)) if rows else float("nan")
    lines = [f"# {env['model']} decoder layer, {args.dtype}, `patch` against torch ({env['device']}, torch "
             f"{env['torch']}, {env['date']})", "",
             f"`benchmarks/gemm_decoder.py`: "
             + ("CUDA-graph replay" if args.device.startswith("cuda") else "wall time of eager calls")
             + f", medians of {args.rounds} alternating rounds x {args.replays} calls"
             + (", L2 flushed before each" if args.device.startswith("cuda") else "")
             + f"; decode against a {args.context}-token KV cache. "
             f"Patched layers: {', '.join(names) or 'none'}. Geomean speedup {geo:.3f}.", "",
             "| mode | tokens | torch µs | kernelrl µs | speedup | torch rel err | kernelrl rel err |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['mode']} | {r['tokens']} | {r['torch_us']:.1f} | {r['kernelrl_us']:.1f} | {r['speedup']:.3f} | "
              f"{r['torch_rel_err']:.2e} | {r['kernelrl_rel_err']:.2e} |" for r in rows]
    (args.out / "gemm_decoder.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
