"""How long a worker takes to start, forked by the fork server against a fresh interpreter: the wall time from
`Worker(...)` to its answer to `ready` (the harness loaded, on CUDA the device opened and the worker confined), the
median over N workers started one after another, each way in its own process (`KERNELRL_FORK_SERVER` is read at
import). The server's own start (the first worker's) is counted apart.

Usage: python benchmarks/worker_start.py OUT.json [--device cpu|cuda] [--workers 8]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE_RUN = """
import json, sys, tempfile, time
from pathlib import Path
from kernelrl.evaluate.evaluator import HARNESS
from kernelrl.sandbox.process import Worker
device, n = sys.argv[1], int(sys.argv[2])
times = []
with tempfile.TemporaryDirectory() as tmp:
    for _ in range(n):
        t = time.perf_counter()
        with Worker(HARNESS, scratch_root=Path(tmp), init={"role": "candidate", "device": device}) as w:
            assert w.request({"op": "ready"}, 300)[0]["type"] == "ready"
            times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


def run(device: str, workers: int, forked: bool) -> list[float]:
    env = dict(os.environ, KERNELRL_FORK_SERVER="1" if forked else "0",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", ONE_RUN, device, str(workers)], env=env, check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    result = {"device": args.device, "workers": args.workers, "cores": len(os.sched_getaffinity(0))}
    for name, forked in (("fresh_interpreter", False), ("fork_server", True)):
        times = run(args.device, args.workers, forked)
        result[name] = {"first_s": round(times[0], 3), "median_s": round(statistics.median(times[1:]), 3),
                        "times_s": [round(t, 3) for t in times]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v if not isinstance(v, dict) else {x: v[x] for x in ("first_s", "median_s")}
                      for k, v in result.items()}))


if __name__ == "__main__":
    main()
