"""The non-LLM proposers over a few suite tasks on one device: what `kernelrl optimize` finds without an LLM.

Usage: python benchmarks/optimize_device.py OUT_DIR [TASK.py ...] [--device cuda] [--proposers a,b,...]
                                             [--time-budget-s 360]
Writes, per task, OUT_DIR/TASK/ (store.sqlite, report.md, speedup.png, best.py, candidates.jsonl), and over
all tasks OUT_DIR/optimize.json and OUT_DIR/optimize.md (one row per task and proposer). Results are
rewritten after every task, so a run cut short still leaves what it measured.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.search.loop import Loop, LoopConfig
from kernelrl.search.proposers import PROPOSERS
from kernelrl.search.report import write_report
from kernelrl.search.store import Store
from kernelrl.task import Task

ROOT = Path(__file__).resolve().parents[1]
# One per level, one with a convolution; more can be named on the command line.
DEFAULT_TASKS = ["suite/level1/softmax_fp32.py", "suite/level2/conv2d_bn_relu_fp32.py",
                 "suite/level3/mlp_relu_fp32.py"]
# max-autotune compiles take minutes per task; ask for it by name.
DEFAULT_PROPOSERS = [p for p in PROPOSERS if p != "compile-max-autotune"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("tasks", nargs="*", help=f"reference files [{' '.join(DEFAULT_TASKS)}]")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--proposers", default=",".join(DEFAULT_PROPOSERS))
    ap.add_argument("--time-budget-s", type=float, default=360.0, help="start no new task after this long (s)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = [Path(t) if Path(t).is_absolute() or Path(t).exists() else ROOT / t for t in (args.tasks or DEFAULT_TASKS)]
    proposers = tuple(p.strip() for p in args.proposers.split(",") if p.strip())
    env = {"device": args.device, "torch": torch.__version__, "python": platform.python_version(),
           "gpu": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else platform.processor(),
           "proposers": list(proposers), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    rows: list[dict] = []
    t_start = time.monotonic()
    with Evaluator(EvalConfig(device=args.device)) as ev:
        for path in tasks:
            if time.monotonic() - t_start > args.time_budget_s:
                rows.append({"task": path.stem, "proposer": "—", "status": "skipped",
                             "message": f"time budget {args.time_budget_s:.0f}s spent"})
                continue
            task = Task.from_file(path)
            run_dir = args.out / task.name
            t0 = time.monotonic()
            with Store(run_dir / "store.sqlite") as store:
                result = Loop(task, store, {args.device: ev}, config=LoopConfig(proposers=proposers, polish=False),
                              on_event=print).run()
                write_report(store, task, run_dir, run={"stop_reason": result.stop_reason})
                for c in store.candidates(task):
                    v = c.verdict
                    rows.append({
                        "task": task.name, "proposer": c.proposer, "status": c.status, "speedup": c.speedup,
                        "ref_us": v.reference.median_us if v and v.reference else None,
                        "cand_us": v.candidate_timing.median_us if v and v.candidate_timing else None,
                        "method": v.candidate_timing.method if v and v.candidate_timing else None,
                        "flags": [f"{f.check}:{f.severity}" for f in v.flags] if v else [],
                        "message": _last_line(v.message) if v and c.status != "ok" else "",
                        "eval_s": round(v.seconds, 1) if v else None})
            print(f"{task.name}: {time.monotonic() - t0:.0f}s", flush=True)
            _write(args.out, env, rows)
    _write(args.out, env, rows)
    print((args.out / "optimize.md").read_text())


def _write(out: Path, env: dict, rows: list[dict]) -> None:
    (out / "optimize.json").write_text(json.dumps({"env": env, "rows": rows}, indent=2))
    lines = [f"# Non-LLM proposers on {env['gpu']} ({env['device']}), torch {env['torch']}, {env['date']}", "",
             "Speedup = reference time / candidate time, measured by the evaluator (median per call).", "",
             "| task | proposer | status | speedup | ref µs | cand µs | timing | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = f"{r['speedup']:.3f}×" if r.get("speedup") else "—"
        ref = f"{r['ref_us']:.1f}" if r.get("ref_us") else "—"
        cand = f"{r['cand_us']:.1f}" if r.get("cand_us") else "—"
        note = (r.get("message") or ", ".join(r.get("flags") or [])).replace("|", "\\|")[:120]
        lines.append(f"| {r['task']} | {r['proposer']} | {r['status']} | {sp} | {ref} | {cand} | "
                     f"{r.get('method') or '—'} | {note} |")
    (out / "optimize.md").write_text("\n".join(lines) + "\n")


def _last_line(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


if __name__ == "__main__":
    main()
