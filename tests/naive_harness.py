"""A deliberately naive KernelBench-style harness: the baseline that every exploit in tests/exploits/ fools.

It does what public harnesses did: reference and candidate source executed into one shared namespace in the
harness's own process, a fixed seed, one input set reused for every timed call, torch.allclose at
atol = rtol = 1e-2, time.perf_counter on CPU and CUDA events on the current stream, an L2 flush between timed
CUDA calls, and the reference's baseline timed in the same process from a fresh copy of its source.
Run as a script it prints its result as the last JSON line on stdout, and `evaluate_in_subprocess` trusts it.
Never use it to judge anything: it exists to prove the exploits work.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEED = 42
TRIALS = 5
WARMUP = 3
ITERS = 30
TOL = 1e-2


def _exec_source(source: str, ctx: dict, filename: str) -> dict:
    # A real file so inspect.getsource works (Triton's @jit needs it).
    path = Path(tempfile.mkdtemp(prefix="naive_")) / filename
    path.write_text(source)
    exec(compile(source, str(path), "exec"), ctx)
    return ctx


def _to(obj, device):
    import torch
    return obj.to(device) if isinstance(obj, torch.Tensor) else obj


def _sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time_calls(model, inputs, device, iters) -> float:
    """Mean time of one call in microseconds."""
    import torch
    if device.startswith("cuda"):
        flush = torch.empty(64 * 1024 * 1024, dtype=torch.int8, device=device)
        total = 0.0
        for _ in range(iters):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            end.synchronize()
            total += start.elapsed_time(end) * 1e3
        return total / iters
    total = 0.0
    for _ in range(iters):
        t0 = time.perf_counter()
        model(*inputs)
        total += (time.perf_counter() - t0) * 1e6
    return total / iters


def naive_evaluate(ref_source: str, cand_source: str, device: str = "cpu") -> dict:
    """Correctness and speedup the way a naive harness measures them."""
    import torch

    # KernelBench: both sources go into one context; the reference's functions are taken first.
    ctx: dict = {"__name__": "naive_context"}
    _exec_source(ref_source, ctx, "reference.py")
    Model, get_inputs, get_init_inputs = ctx["Model"], ctx["get_inputs"], ctx["get_init_inputs"]
    _exec_source(cand_source, ctx, "candidate.py")
    ModelNew = ctx["ModelNew"]

    torch.manual_seed(SEED)
    init = [_to(a, device) for a in get_init_inputs()]
    torch.manual_seed(SEED)
    model = Model(*init).to(device)
    torch.manual_seed(SEED)
    model_new = ModelNew(*init).to(device)

    torch.manual_seed(SEED)
    trial_seeds = [int(torch.randint(0, 2 ** 31 - 1, (1,)).item()) for _ in range(TRIALS)]
    with torch.no_grad():
        for seed in trial_seeds:
            torch.manual_seed(seed)
            inputs = [_to(a, device) for a in get_inputs()]
            expected = model(*inputs).detach().to("cpu", copy=True)
            _sync(device)
            out = model_new(*inputs)
            _sync(device)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(expected.shape):
                return {"correct": False, "message": f"shape {getattr(out, 'shape', None)} != {expected.shape}"}
            if not torch.allclose(out.to("cpu"), expected, atol=TOL, rtol=TOL):
                return {"correct": False, "message": "values differ"}

        torch.manual_seed(SEED)
        inputs = [_to(a, device) for a in get_inputs()]
        for _ in range(WARMUP):
            model_new(*inputs)
        _sync(device)
        cand_us = _time_calls(model_new, inputs, device, ITERS)

        # Baseline: the reference from a fresh copy of its source (as a precomputed baseline would be).
        fresh: dict = {"__name__": "naive_baseline"}
        _exec_source(ref_source, fresh, "reference_baseline.py")
        torch.manual_seed(SEED)
        ref_model = fresh["Model"](*[_to(a, device) for a in fresh["get_init_inputs"]()]).to(device)
        torch.manual_seed(SEED)
        ref_inputs = [_to(a, device) for a in fresh["get_inputs"]()]
        for _ in range(WARMUP):
            ref_model(*ref_inputs)
        _sync(device)
        ref_us = _time_calls(ref_model, ref_inputs, device, ITERS)
    return {"correct": True, "speedup": ref_us / max(cand_us, 1e-3), "candidate_us": cand_us, "reference_us": ref_us,
            "message": "passed"}


def evaluate_in_subprocess(ref_path: str | Path, cand_path: str | Path, device: str = "cpu",
                           timeout_s: float = 300) -> dict:
    """Run the naive harness in a child and trust the last JSON line it prints (as naive pipelines do)."""
    env = dict(os.environ)
    out = subprocess.run([sys.executable, __file__, str(ref_path), str(cand_path), device],
                         capture_output=True, text=True, timeout=timeout_s, env=env)
    for line in reversed(out.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {"correct": False, "message": f"no result (exit {out.returncode}): {out.stderr[-2000:]}"}


def main(argv: list[str]) -> None:
    ref_path, cand_path = argv[0], argv[1]
    device = argv[2] if len(argv) > 2 else "cpu"
    result = naive_evaluate(Path(ref_path).read_text(), Path(cand_path).read_text(), device)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
