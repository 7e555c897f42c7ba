"""Candidates per GPU-hour and the GPU's busy fraction, serial (`Evaluator.evaluate` one after another) and
pipelined (`LocalScheduler`: workers, imports and builds prepared ahead of the GPU stage).

Usage: python benchmarks/eval_throughput.py KERNELBENCH_DIR OUT_DIR [--device cuda] [--limit 24]
                                            [--budget-s 100] [--sets python,mixed] [--modes serial,pipelined]
KERNELBENCH_DIR holds level1/ and level2/ (on the GPU machine: ../shared/kernelbench). Sets:
- python: identity candidates (the reference with Model renamed ModelNew) on `--limit` level 1 and 2 tasks
  drawn with `--seed`.
- mixed: small load_inline CUDA and Triton kernels of our own for level-1 elementwise tasks (below), each beside
  an identity candidate, built cold (an empty cache for every run).
Each (set, mode) run starts no candidate after `--budget-s` and gets an empty build cache. Writes
OUT_DIR/eval_throughput.json and OUT_DIR/eval_throughput.md.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from kernelrl.evaluate import EvalConfig, EvaluationError, Evaluator
from kernelrl.scale.local import LocalScheduler
from kernelrl.task import Candidate, Task, identity_candidate

# the CPU stage (the first call, with its `compiling`, is made there, beside the GPU stage) and the wait; the rest
# is GPU stage
GPU_PHASES_NOT = ("reference", "start_and_build", "first_call", "compiling", "first_call_wait", "waited")

# A load_inline extension `ext` whose `run(x)` writes {expr} of every element v of a float32 CUDA tensor x into a
# new tensor (kernel {kernel}, extension {ext}); real_corpus.py builds its CUDA candidates on it too.
CUDA_EXTENSION = '''src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void {kernel}(const float* __restrict__ x, float* __restrict__ y, long long n) {{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {{
        float v = x[i];
        y[i] = {expr};
    }}
}}

torch::Tensor run(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "a float32 CUDA tensor is expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long long n = xc.numel();
    long long blocks = std::min<long long>((n + 255) / 256, 132LL * 32);
    {kernel}<<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""
ext = load_inline(name="{ext}", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src,
                  functions=["run"], extra_cuda_cflags=["-O3"], verbose=False)
'''

CUDA_TEMPLATE = '''"""{what} in CUDA (load_inline): one grid-stride pass over the elements."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

''' + CUDA_EXTENSION + '''

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        return ext.run(x)
'''

# A Triton kernel `{kernel}(x_ptr, y_ptr, n, BLOCK)` writing {expr} of every element v; real_corpus.py uses it too.
TRITON_KERNEL = '''@triton.jit
def {kernel}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, {expr}, mask=mask)
'''

TRITON_TEMPLATE = '''"""{what} in Triton: one pass over the elements, 64-bit offsets."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


''' + TRITON_KERNEL + '''

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        {kernel}[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        return y
'''

# level-1 task -> (language, what, expression of v): honest kernels, no faster than they look.
KERNELS = {
    "19_ReLU": ("cuda", "ReLU", "fmaxf(v, 0.f)"),
    "20_LeakyReLU": ("cuda", "LeakyReLU(0.01)", "v > 0.f ? v : 0.01f * v"),
    "21_Sigmoid": ("cuda", "Sigmoid", "1.f / (1.f + expf(-v))"),
    "32_HardTanh": ("cuda", "HardTanh", "fminf(fmaxf(v, -1.f), 1.f)"),
    "22_Tanh": ("triton", "Tanh", "2.0 * tl.sigmoid(2.0 * v) - 1.0"),
    "25_Swish": ("triton", "Swish", "v * tl.sigmoid(v)"),
    "30_Softsign": ("triton", "Softsign", "v / (1.0 + tl.abs(v))"),
    "28_HardSigmoid": ("triton", "HardSigmoid", "tl.minimum(tl.maximum(v / 6.0 + 0.5, 0.0), 1.0)"),
}


def identity(task: Task) -> Candidate:
    """The reference itself as a candidate (`Model` renamed `ModelNew`), named for the throughput tables."""
    return Candidate(identity_candidate(task).source, name=f"{task.name}-identity")


def own_kernel(task: Task, stem: str) -> Candidate:
    language, what, expr = KERNELS[stem]
    template = CUDA_TEMPLATE if language == "cuda" else TRITON_TEMPLATE
    name = stem.split("_", 1)[1].lower()
    source = template.format(what=what, expr=expr, kernel="op_kernel", ext=f"kernelrl_tp_{name}")
    return Candidate.from_source(source, name=f"{task.name}-{language}")


def jobs(root: Path, which: str, limit: int, seed: int) -> list[tuple[Task, Candidate]]:
    if which == "python":
        files = sorted(root.glob("level1/*.py")) + sorted(root.glob("level2/*.py"))
        files = random.Random(seed).sample(files, min(limit, len(files)))
        return [(t, identity(t)) for t in map(Task.from_file, files)]
    out = []
    for stem in list(KERNELS)[:limit]:
        task = Task.from_file(root / "level1" / f"{stem}.py")
        out += [(task, own_kernel(task, stem)), (task, identity(task))]
    return out


def serial(config: EvalConfig, work, budget_s: float) -> dict:
    """`Evaluator.evaluate` one candidate after another, as `kernelrl bench` ran them; GPU busy from phases."""
    rows, t0 = [], time.monotonic()
    with Evaluator(config) as ev:
        for task, cand in work:
            if time.monotonic() - t0 > budget_s:
                break
            rows.append(judge(lambda: ev.evaluate(task, cand), task, cand))
    wall = time.monotonic() - t0
    busy = sum(r["gpu_s"] for r in rows) / wall if wall else 0.0
    return summary(rows, wall, busy)


def pipelined(config: EvalConfig, work, budget_s: float, lookahead: int, cpu_workers: int | None) -> dict:
    """Every job submitted to a LocalScheduler at once; none started after the budget."""
    t0 = time.monotonic()
    sched = LocalScheduler(config, (config.device,), lookahead=lookahead, cpu_workers=cpu_workers)
    futures = [(task, cand, sched.submit(task, cand)) for task, cand in work]
    rows = []
    for task, cand, fut in futures:
        left = budget_s - (time.monotonic() - t0)
        if left <= 0:
            break
        try:
            fut.result(timeout=left)
        except TimeoutError:
            break
        except Exception:  # noqa: BLE001 - recorded below by judge()
            pass
    sched.close()  # cancels what was not on the device; the job on it finishes
    wall, stats = time.monotonic() - t0, sched.stats()
    for task, cand, fut in futures:
        if fut.done() and not fut.cancelled():
            rows.append(judge(fut.result, task, cand))
    busy = sum(stats.device_busy.values())  # one device
    return dict(summary(rows, wall, busy), scheduler=stats.to_dict())


def judge(get, task: Task, cand: Candidate) -> dict:
    try:
        v = get()
    except EvaluationError as e:
        return {"task": task.name, "candidate": cand.name, "status": "reference_error", "message": str(e)[:300],
                "gpu_s": 0.0}
    return {"task": task.name, "candidate": cand.name, "language": cand.language, "status": v.status,
            "speedup": v.speedup, "speedup_method": v.speedup_method, "seconds": v.seconds, "phases": v.phases,
            "gpu_s": sum(s for k, s in v.phases.items() if k not in GPU_PHASES_NOT),
            "message": (v.message or "")[:300]}


def summary(rows: list[dict], wall: float, busy: float) -> dict:
    done = len(rows)
    speedups = [r["speedup"] for r in rows if r.get("speedup") and r["candidate"].endswith("identity")]
    return {"judged": done, "wall_s": wall, "per_gpu_hour": 3600.0 * done / wall if wall else 0.0,
            "gpu_busy": busy, "statuses": {s: sum(r["status"] == s for r in rows) for s in
                                           sorted({r["status"] for r in rows})},
            "identity_speedup_median": statistics.median(speedups) if speedups else None,
            "identity_speedup_max_dev": max(abs(s - 1) for s in speedups) if speedups else None,
            "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--limit", type=int, default=24, help="tasks per set (mixed: at most 8)")
    ap.add_argument("--budget-s", type=float, default=100.0, help="start no candidate after this long, per run (s)")
    ap.add_argument("--sets", default="python,mixed")
    ap.add_argument("--modes", default="serial,pipelined")
    ap.add_argument("--lookahead", type=int, default=3, help="prepared jobs waiting for the GPU, at most")
    ap.add_argument("--cpu-workers", type=int, default=None, help="jobs prepared at once (default: the scheduler's)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not (args.kernelbench / "level1").is_dir():
        ap.error(f"{args.kernelbench} has no level1/ folder: pass the KernelBench checkout (../shared/kernelbench)")
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for which in args.sets.split(","):
        work = jobs(args.kernelbench, which, args.limit, args.seed)
        for mode in args.modes.split(","):
            config = EvalConfig(device=args.device, cache_dir=tempfile.mkdtemp(prefix=f"kernelrl-tp-{mode}-"))
            r = serial(config, work, args.budget_s) if mode == "serial" else \
                pipelined(config, work, args.budget_s, args.lookahead, args.cpu_workers)
            runs.append({"set": which, "mode": mode, "lookahead": args.lookahead if mode != "serial" else None,
                         "jobs": len(work), **r})
            print(json.dumps({k: v for k, v in runs[-1].items() if k not in ("rows", "scheduler")}), flush=True)
            write(args, runs)


def write(args, runs):
    env = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
           "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "budget_s": args.budget_s,
           "limit": args.limit, "seed": args.seed}
    (args.out / "eval_throughput.json").write_text(json.dumps({"env": env, "runs": runs}, indent=1))
    lines = [f"# Evaluation throughput on one GPU ({env['device']}, torch {env['torch']}, {env['date']})", "",
             f"`benchmarks/eval_throughput.py`, --limit {args.limit}, --budget-s {args.budget_s:g}, seed "
             f"{args.seed}. Serial: `Evaluator.evaluate` one after another (as bench ran it). Pipelined: "
             f"`LocalScheduler`, lookahead {args.lookahead}. Each run has an empty build cache. GPU busy: wall "
             "time in the GPU stage (correctness, timing, graphs, recheck, report) over the run's wall time.", "",
             "| set | mode | judged | wall s | candidates / GPU-hour | GPU busy | statuses | identity speedup "
             "median (max deviation) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        st = ", ".join(f"{k} {v}" for k, v in r["statuses"].items())
        ident = (f"{r['identity_speedup_median']:.3f} ({r['identity_speedup_max_dev']:.3f})"
                 if r["identity_speedup_median"] else "n/a")
        lines.append(f"| {r['set']} | {r['mode']} | {r['judged']} | {r['wall_s']:.0f} | {r['per_gpu_hour']:.0f} | "
                     f"{100 * r['gpu_busy']:.0f}% | {st} | {ident} |")
    (args.out / "eval_throughput.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
