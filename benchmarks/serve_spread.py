"""Repeatability through the service: the same candidate judged N times by `kernelrl serve`, its speedups' spread.

Usage: python benchmarks/serve_spread.py OUT_DIR [--device cuda] [--repeats 5]
Starts `kernelrl serve` on a free localhost port (a fresh job database and build cache under a temporary folder,
a random bearer token), submits each candidate `--repeats` times in one batch with the store bypassed
(`"cache": false`), so the copies go through the service's pipeline together as a trainer's batch would, and
writes OUT_DIR/serve_spread.json and OUT_DIR/serve_spread.md. Spread = (max − min) / median; the goal is ≤ 2%.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from eval_overhead import spread  # the same spread definition as the evaluator's own repeatability benchmark
from kernelrl.client import Client, ServiceError, request

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {
    "cuda": [("tests/data/eval_gpu/softmax_rows.py", "tests/data/eval_gpu/softmax_cuda.py"),
             ("tests/data/eval_gpu/softmax_rows.py", "tests/data/eval_gpu/softmax_triton.py"),
             ("examples/level1/gelu_mlp.py", "examples/candidates/gelu_mlp.py")],
    "cpu": [("tests/data/eval/scale_add.py", "tests/data/eval/correct.py")],
}
GOAL = 0.02


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for all verdicts")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kernelrl-serve-spread-"))
    token = secrets.token_hex(16)
    server, url = start_server(work, args.device, token)
    rows = []
    try:
        client = Client(url, token=token)
        batches = []
        for ref_path, cand_path in PAIRS["cuda" if args.device.startswith("cuda") else "cpu"]:
            body = request((ROOT / cand_path).read_text(), reference=(ROOT / ref_path).read_text(), cache=False,
                           name=Path(ref_path).stem)
            batches.append((ref_path, cand_path, client.submit_many([body] * args.repeats)))
        t0 = time.monotonic()
        for ref_path, cand_path, ids in batches:
            verdicts = client.wait_many(ids, timeout=args.timeout)
            runs = [{"job": i, "status": v.status, "speedup": v.speedup, "speedup_method": v.speedup_method,
                     "speedup_stderr": v.speedup_stderr, "latency_speedup": v.latency_speedup,
                     "seconds": v.seconds, "message": v.message[:300]} for i, v in zip(ids, verdicts)]
            rows.append({"task": Path(ref_path).stem, "candidate": Path(cand_path).stem,
                         "statuses": sorted({r["status"] for r in runs}),
                         "methods": sorted({r["speedup_method"] or "" for r in runs}),
                         **spread(runs, "speedup"), **spread(runs, "latency_speedup"), "runs": runs})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "runs"}, indent=1), flush=True)
        wall = time.monotonic() - t0
        with urllib_open(url + "/metrics", token) as r:
            metrics = r.read().decode()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    write(args, rows, wall, metrics)


def start_server(work: Path, device: str, token: str, *options: str) -> tuple[subprocess.Popen, str]:
    """`kernelrl serve` on a free port with its database and cache under `work` (more `options` for it, such as
    --suite DIR); returns (process, url)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, KERNELRL_API_TOKEN=token, KERNELRL_CACHE=str(work / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "kernelrl.cli", "serve", "--port", str(port), "--db",
                             str(work / "jobs.db"), "--device", device, "--report-every", "30", *options], env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            Client(url, token=token, timeout=2).health()
            return proc, url
        except ServiceError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                sys.exit(f"kernelrl serve did not start (exit code {proc.poll()})")
            time.sleep(0.5)


def urllib_open(url: str, token: str):
    import urllib.request

    return urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}),
                                  timeout=30)


def write(args, rows: list[dict], wall_s: float, metrics: str):
    env = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {os.cpu_count()} cores",
           "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "repeats": args.repeats,
           "wall_seconds": round(wall_s, 1)}
    (args.out / "serve_spread.json").write_text(json.dumps({"env": env, "goal_spread": GOAL, "rows": rows,
                                                            "metrics": metrics}, indent=1))

    def pct(x):
        return f"{100 * x:.2f}%" if x is not None else "n/a"

    def x(v):
        return f"{v:.3f}" if v else "n/a"

    lines = [f"# The same candidate judged {args.repeats} times through `kernelrl serve` ({env['device']}, torch "
             f"{env['torch']}, {env['date']})", "",
             f"Each candidate submitted {args.repeats} times in one batch with the store bypassed (`\"cache\": "
             "false`), so the copies share the service's pipeline as a trainer's batch would. Spread = (max − min) "
             f"/ median of the speedups; goal ≤ {pct(GOAL)}. All verdicts in {wall_s:.0f} s.", "",
             "| task | candidate | statuses | method | speedups | median | spread | goal met | latency spread |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        met = "yes" if r["speedup_spread"] is not None and r["speedup_spread"] <= GOAL else "no"
        lines.append(f"| {r['task']} | {r['candidate']} | {', '.join(r['statuses'])} | {', '.join(r['methods'])} | "
                     f"{', '.join(x(s) for s in r['speedups'])} | {x(r['speedup_median'])} | "
                     f"{pct(r['speedup_spread'])} | {met} | {pct(r['latency_speedup_spread'])} |")
    (args.out / "serve_spread.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
