"""GRPO-shaped load through `kernelrl serve`: a group of candidates per task, submitted with kernelrl.client as a
trainer submits its rollouts, and what the service makes of it: candidates per hour, the GPU's busy fraction and
each group's latency.

Usage: python benchmarks/serve_grpo.py SUITE CORPUS OUT [--device cuda] [--limit N] [--groups 4] [--time-limit S]
                                      [--stop-after S]

CORPUS is a folder benchmarks/real_corpus.py wrote for SUITE (`--per-task 8`: its corpus.json names each task's
group). Starts `kernelrl serve --suite SUITE` on a free localhost port (a fresh job database and build cache, a
random bearer token) and keeps `--groups` groups in flight: each one batch request of a task's candidates (by task
id, the store bypassed) whose verdicts are waited on together, the next group submitted as one finishes. Tasks go
in an order drawn with a fixed seed, so that a run cut short by `--limit` or `--time-limit` (no group submitted
after it; those in flight finish, unless `--stop-after` seconds come first) samples every level. GPU busy is the
GPU stage's wall time in the verdicts' phases over the run's wall time (the service's own busy fraction, over its
whole life, beside it).
Appends a line to OUT/groups.jsonl as each group finishes, then one to OUT/runs.jsonl (as `kernelrl bench` writes
them, with the groups' latencies), and writes OUT/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import signal
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import torch

from eval_throughput import GPU_PHASES_NOT
from kernelrl.bench.runs import append_run
from kernelrl.client import Client, EvaluationFailed, ServiceError, request
from serve_spread import start_server, urllib_open


def load_groups(corpus: Path, limit: int | None) -> list[tuple[str, list[dict]]]:
    """(task, its candidates in sample order: sample, kind, file) from the corpus's manifest, in the drawn order,
    the first `limit`."""
    manifest = json.loads((corpus / "corpus.json").read_text())
    groups = sorted(manifest["tasks"].items())
    random.Random(0).shuffle(groups)
    return groups[:limit] if limit else groups


def judge_group(client: Client, corpus: Path, task: str, entries: list[dict], timeout: float | None) -> dict:
    """Submit one task's group in one request, wait for all its verdicts; the group's row (`unfinished` where they
    did not all come within `timeout` seconds)."""
    bodies = [request((corpus / e["file"]).read_text(), task=task, cache=False, name=f"{task}#{e['sample']}")
              for e in entries]
    t0 = time.monotonic()
    try:
        verdicts = client.wait_many(client.submit_many(bodies), timeout=timeout, return_errors=True)
    except ServiceError as e:
        return {"task": task, "latency_s": None, "unfinished": str(e), "candidates": []}
    latency = time.monotonic() - t0
    return {"task": task, "latency_s": round(latency, 2), "candidates": [
        candidate_row(e, v) for e, v in zip(entries, verdicts)]}


def candidate_row(entry: dict, v) -> dict:
    """One candidate's outcome: its status (or why the service could not judge it) and GPU-stage seconds."""
    if isinstance(v, EvaluationFailed):
        return {"sample": entry["sample"], "kind": entry["kind"], "status": "failed", "gpu_s": 0.0,
                "message": str(v)[:300]}
    gpu_s = sum(s for k, s in v.phases.items() if k not in GPU_PHASES_NOT)
    return {"sample": entry["sample"], "kind": entry["kind"], "status": v.status, "speedup": v.speedup,
            "method": v.speedup_method, "gpu_s": round(gpu_s, 3), "phases": v.phases,
            "message": (v.message or "")[:300]}


def run_groups(client: Client, corpus: Path, groups, in_flight: int, time_limit: float | None,
               stop_after: float | None, log: Path) -> tuple[list[dict], float]:
    """Keep `in_flight` groups going until every group is judged or `time_limit` passed, waiting for none after
    `stop_after` seconds; each group's row appended to `log` as it finishes. (rows, wall seconds)."""
    todo, rows, lock = iter(groups), [], threading.Lock()
    t0 = time.monotonic()

    def left() -> float | None:
        return None if stop_after is None else max(1.0, stop_after - (time.monotonic() - t0))

    def worker():
        while time_limit is None or time.monotonic() - t0 < time_limit:
            with lock:
                task, entries = next(todo, (None, None))
            if task is None:
                return
            row = judge_group(client, corpus, task, entries, left())
            with lock:
                rows.append(row)
                with open(log, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{task}: " + (row.get("unfinished") or f"{row['latency_s']:.1f} s, "
                                     + ", ".join(c["status"] for c in row["candidates"])), flush=True)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows, time.monotonic() - t0


def service_busy(url: str, token: str) -> dict[str, float]:
    """Each device's busy fraction over the service's life, from its /metrics."""
    with urllib_open(url + "/metrics", token) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^kernelrl_device_busy_fraction\{device="([^"]+)"\} (\S+)$', text, re.M)}


def run_record(started: str, wall_s: float, rows: list[dict], busy: dict[str, float]) -> dict:
    """The run's line: wall time, groups (and those unfinished), candidates, judged (a verdict each) and per hour,
    GPU busy, group latencies (s) and statuses by kind."""
    cands = [c for r in rows for c in r["candidates"]]
    judged = sum(c["status"] != "failed" for c in cands)
    latencies = sorted(r["latency_s"] for r in rows if r["latency_s"] is not None)
    by_kind = {kind: dict(Counter(c["status"] for c in cands if c["kind"] == kind))
               for kind in sorted({c["kind"] for c in cands})}
    return {"started": started, "wall_s": round(wall_s, 1), "tasks": len(rows),
            "unfinished": sum(1 for r in rows if r.get("unfinished")), "candidates": len(cands),
            "judged": judged, "failed": len(cands) - judged,
            "per_hour": round(3600 * judged / wall_s, 1) if wall_s > 0 else None,
            "gpu_busy": round(sum(c["gpu_s"] for c in cands) / wall_s, 3) if wall_s > 0 else None,
            "device_busy": {d: round(b, 3) for d, b in busy.items()},
            "group_latency_s": {"median": round(statistics.median(latencies), 2), "p90": round(p90(latencies), 2),
                                "max": latencies[-1]} if latencies else None,
            "statuses": dict(sorted(Counter(c["status"] for c in cands).items())),
            "by_kind": by_kind}


def p90(values: list[float]) -> float:
    """The 90th percentile of `values` (between the smallest and the largest)."""
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def write_readme(out: Path, args, record: dict, device: str) -> None:
    lat = record["group_latency_s"] or {}
    lines = [f"# GRPO-shaped load through `kernelrl serve` ({device}, torch {torch.__version__}, "
             f"{time.strftime('%Y-%m-%d')})", "",
             f"`python benchmarks/serve_grpo.py {args.suite} {args.corpus} {args.out} --device {args.device} --groups "
             f"{args.groups}" + (f" --limit {args.limit}" if args.limit else "")
             + (f" --time-limit {args.time_limit:g}" if args.time_limit else "") + "`: each task's group (the "
             "candidates benchmarks/real_corpus.py wrote) in one batch request, "
             f"{args.groups} groups in flight, a fresh service with a cold build cache.", "",
             "| groups | candidates | judged | wall s | per hour | device busy (phases) | service busy | group latency "
             "median / p90 / max (s) |", "| --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| {record['tasks']} | {record['candidates']} | {record['judged']} | {record['wall_s']:.0f} | "
             f"{record['per_hour'] or 0:.0f} | {100 * (record['gpu_busy'] or 0):.0f}% | "
             + " ".join(f"{d} {100 * b:.0f}%" for d, b in record["device_busy"].items())
             + f" | {lat.get('median', 0):.1f} / {lat.get('p90', 0):.1f} / {lat.get('max', 0):.1f} |", "",
             "Statuses: " + ", ".join(f"{k} {v}" for k, v in record["statuses"].items()) + ".", "",
             "| kind | " + " | ".join(sorted(record["statuses"])) + " |",
             "| --- |" + " --- |" * len(record["statuses"])]
    lines += [f"| {kind} | " + " | ".join(str(counts.get(s, 0)) for s in sorted(record["statuses"])) + " |"
              for kind, counts in sorted(record["by_kind"].items())]
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path, help="the references (the service's --suite)")
    ap.add_argument("corpus", type=Path, help="a folder benchmarks/real_corpus.py wrote for SUITE")
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--limit", type=int, default=None, help="only the first N tasks' groups (by task name)")
    ap.add_argument("--groups", type=int, default=4, help="groups in flight at once")
    ap.add_argument("--time-limit", type=float, default=None, help="submit no group after this many seconds")
    ap.add_argument("--group", type=int, default=1, help="the service's --group: candidates of one task judged "
                                                          "together, the reference timed once a round beside each")
    ap.add_argument("--stop-after", type=float, default=None, help="wait for no verdict after this many seconds "
                                                                   "(a group not judged by then counts as unfinished)")
    args = ap.parse_args()
    groups = load_groups(args.corpus, args.limit)
    args.out.mkdir(parents=True, exist_ok=True)
    work, token = Path(tempfile.mkdtemp(prefix="kernelrl-serve-grpo-")), secrets.token_hex(16)
    server, url = start_server(work, args.device, token, "--suite", str(args.suite), "--group", str(args.group))
    try:
        client = Client(url, token=token)
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        rows, wall = run_groups(client, args.corpus, groups, args.groups, args.time_limit, args.stop_after,
                                args.out / "groups.jsonl")
        busy = service_busy(url, token)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    record = run_record(started, wall, rows, busy)
    if args.group > 1:
        record["group"] = args.group
    append_run(args.out, record)
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {os.cpu_count()} cores"
    write_readme(args.out, args, record, device)
    print(json.dumps({k: v for k, v in record.items() if k != "by_kind"}))


if __name__ == "__main__":
    main()
