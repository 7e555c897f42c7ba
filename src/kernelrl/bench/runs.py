"""A bench output folder's `runs.jsonl`: one line per run, with its wall time, what it judged and the devices' busy
fractions, so rates over several `--resume` runs of one suite come from the lines together."""
from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from kernelrl.bench.metrics import kernelbench_rule
from kernelrl.bench.result import TaskResult

RUNS_FILE = "runs.jsonl"
# Tasks a run finished without a verdict, by status: no candidate file, a file that is not a candidate, a
# reference that could not run. None of them is judged or counts towards the rate.
UNJUDGED = ("missing", "invalid", "reference_error")


def run_record(started: str, wall_s: float, results: list[TaskResult], device_busy: dict[str, float]) -> dict:
    """One run's line: its start, wall time (s), tasks, candidates (more than tasks where every sample of a task is
    judged), candidates judged (a Verdict each), judged per hour, the results without a verdict by status and
    each device's busy fraction; with KernelBench's rule counts where any task was judged under the kernelbench
    policy."""
    unjudged = {s: sum(1 for r in results if r.status == s) for s in UNJUDGED}
    judged = len(results) - sum(unjudged.values())
    record = {"started": started, "wall_s": round(wall_s, 1), "tasks": len({r.task for r in results}),
              "candidates": len(results), "judged": judged,
              "per_hour": round(3600 * judged / wall_s, 1) if wall_s > 0 else None, **unjudged,
              "device_busy": {d: round(b, 3) for d, b in device_busy.items()}}
    rule = kernelbench_rule(results)
    if rule is not None:
        record["kernelbench_rule"] = rule
    return record


def cpu_times() -> dict[int, tuple[float, float]]:
    """(busy, total) seconds of each core this process may run on, since boot: `cpu_busy` compares two."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    out = {}
    for i, t in enumerate(psutil.cpu_times(percpu=True)):
        if allowed is None or i in allowed:
            total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # Linux counts those in user
            out[i] = (total - t.idle - getattr(t, "iowait", 0.0), total)
    return out


def cpu_busy(before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]]) -> float | None:
    """The share of the cores' time, between two `cpu_times`, spent busy (every process on them, not only this
    one's): near 1 when the host's CPUs, not its lanes or its devices, bound a run. None over no time."""
    busy = sum(after[i][0] - before[i][0] for i in before if i in after)
    total = sum(after[i][1] - before[i][1] for i in before if i in after)
    return round(busy / total, 3) if total > 0 else None


def append_run(out: Path, record: dict) -> Path:
    """Append `record` as a line of `out`/runs.jsonl (the folder is made when missing)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUNS_FILE
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
    return path


def read_runs(out: Path) -> list[dict]:
    """The run lines of `out`/runs.jsonl ([] when there is none)."""
    path = out / RUNS_FILE
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(x) for x in lines if x.strip()]
