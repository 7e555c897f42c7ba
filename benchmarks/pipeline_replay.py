"""Replay a `kernelrl bench` run's jobs through the scheduler's rules under other settings: how its rate would move
with more CPU lanes, another lookahead or group, or another room ahead of the device, from the run's own phases.

Usage: python benchmarks/pipeline_replay.py RUN [--lanes 12,16,1000] [--lookahead N] [--group N] [--room-judged N]
                                          [--first-calls-apart] [--references-ahead] [--repeat K]

Each judged job (suite order, samples in order) spends its CPU-stage seconds (`reference`, `start_and_build`,
`first_call`, as the run measured them) on a lane and its GPU-stage seconds (`correctness`, `alone`, `timing`,
`graphs`, `recheck`, `finish`) on the one device, as `LocalScheduler` runs them: a lane takes the next job while
fewer than the lookahead are prepared and the device has room ahead (the lookahead, the lanes, and `--room-judged`
being judged: the group since the scheduler counts a whole group, 1 before); the device takes the first prepared
job and the others of its task prepared by then, up to the group. A model, not a measurement: a job's CPU-stage
seconds do not change with the lanes (on cores already busy they would grow), and the first calls' waits for the
device are part of them as measured. With `--first-calls-apart`, a row for each setting as well in which a job's
first call (`first_call`, its waits for the device included, as measured) runs off the lanes once its build is done,
a lane free meanwhile for the next job: what the lanes would give if waiting for the device held none of them. With
`--references-ahead`, a row for each setting as well in which no job but the first task's waits for its task's
reference (`reference`): each reference started ahead, while the tasks before it are prepared. With
`--repeat K`, the run's jobs K times over, each copy as tasks of their own: a run K times as long, whose two ends (the
first references starting, the last builds) weigh K times less. Prints the run as measured (`runs.jsonl`) and one
row a setting.
"""
from __future__ import annotations

import argparse
import heapq
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_runs import PHASES, load

from kernelrl.scale.local import ahead_per_device

CPU = ("reference", "start_and_build", "first_call")  # `compiling` and `first_call_wait` are parts of `first_call`


def jobs_of(rows) -> list[tuple[str, float, float, float, float]]:
    """(task, CPU-stage s, GPU-stage s, first call s, reference s) of every judged result, in the order bench
    submits them."""
    def order(r):
        m = re.search(r"_sample_(\d+)", r.candidate or "")
        return r.task, r.sample if r.sample is not None else int(m.group(1)) if m else 0

    out = []
    for r in sorted((r for r in rows if r.verdict is not None and r.verdict.phases), key=order):
        ph = r.verdict.phases
        out.append((r.task, sum(ph.get(k, 0.0) for k in CPU), sum(ph.get(k, 0.0) for k in PHASES),
                    ph.get("first_call", 0.0), ph.get("reference", 0.0)))
    return out


def references_ahead(jobs: list[tuple]) -> list[tuple]:
    """`jobs` with no wait for the task's reference but in the first task's (`--references-ahead`)."""
    first = jobs[0][0] if jobs else None
    return [j if j[0] == first else (j[0], j[1] - j[4], *j[2:]) for j in jobs]


def replay(jobs: list[tuple[str, float, float, float]], lanes: int, lookahead: int, group: int = 1,
           room_judged: int = 1, first_calls_apart: bool = False) -> tuple[float, float]:
    """The wall clock and the device's busy share of `jobs` run through the scheduler's rules (module doc)."""
    lookahead = max(lookahead, group)  # as LocalScheduler sets them
    room = ahead_per_device(lookahead, lanes, 1, room_judged)
    t, busy = 0.0, 0.0
    pending = list(range(len(jobs)))
    preparing: list[tuple[float, int]] = []  # (done at, job): on a lane
    calling: list[tuple[float, int]] = []  # (done at, job): its first call, off the lanes (`first_calls_apart`)
    ready: list[int] = []
    judging: list[int] = []
    judged_at = 0.0
    ahead = 0
    while pending or preparing or calling or ready or judging:
        while pending and len(preparing) < lanes and len(ready) < lookahead and ahead < room:
            j = pending.pop(0)
            heapq.heappush(preparing, (t + jobs[j][1] - (jobs[j][3] if first_calls_apart else 0.0), j))
            ahead += 1
        if not judging and ready:
            first = ready.pop(0)
            judging = [first] + [j for j in ready if jobs[j][0] == jobs[first][0]][:group - 1]
            for j in judging[1:]:
                ready.remove(j)
            work = sum(jobs[j][2] for j in judging)
            judged_at, busy = t + work, busy + work
            continue
        t = min(([preparing[0][0]] if preparing else []) + ([calling[0][0]] if calling else [])
                + ([judged_at] if judging else []))
        if judging and t >= judged_at:
            ahead -= len(judging)
            judging = []
        while preparing and preparing[0][0] <= t:
            j = heapq.heappop(preparing)[1]
            if first_calls_apart:
                heapq.heappush(calling, (t + jobs[j][3], j))
            else:
                ready.append(j)
        while calling and calling[0][0] <= t:
            ready.append(heapq.heappop(calling)[1])
    return t, (busy / t if t > 0 else 0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a `kernelrl bench --out` folder (results.jsonl[.gz], runs.jsonl)")
    ap.add_argument("--lanes", default="12", help="CPU lanes, comma-separated: one row each (default 12)")
    ap.add_argument("--lookahead", type=int, default=3, help="prepared jobs that may wait (at least the group)")
    ap.add_argument("--group", type=int, default=None, help="judged together at most (default: the run's)")
    ap.add_argument("--room-judged", type=int, default=None,
                    help="jobs being judged counted in the device's room (default: the group)")
    ap.add_argument("--first-calls-apart", action="store_true",
                    help="a row for each setting as well with first calls off the lanes (module doc)")
    ap.add_argument("--references-ahead", action="store_true",
                    help="rows as well with each task's reference started ahead (module doc)")
    ap.add_argument("--repeat", type=int, default=1, help="the run's jobs this many times over, as tasks of their own")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        raise SystemExit(f"--repeat must be at least 1, not {a.repeat}")
    rows, runs = load(a.run)
    jobs = [(f"{task}#{k}" if k else task, *rest) for k in range(a.repeat) for task, *rest in jobs_of(rows)]
    if not jobs:
        raise SystemExit(f"{a.run}: no judged result with phases")
    group = a.group or max((r.get("group", 1) for r in runs), default=1)
    judged = a.room_judged if a.room_judged is not None else group
    print("| setting | jobs | wall s | per hour | device busy |\n| --- | --- | --- | --- | --- |")
    for r in runs:
        busy = ", ".join(f"{b:.0%}" for b in (r.get("device_busy") or {}).values())
        print(f"| measured | {r['judged']} | {r['wall_s']:.1f} | {r['per_hour']:.0f} | {busy} |")
    for lanes in (int(x) for x in a.lanes.split(",")):
        for ahead in (False, True) if a.references_ahead else (False,):
            for apart in (False, True) if a.first_calls_apart else (False,):
                wall, busy = replay(references_ahead(jobs) if ahead else jobs, lanes, a.lookahead, group, judged,
                                    apart)
                how = "".join([", references ahead" if ahead else "", ", first calls off the lanes" if apart else "",
                               f", the run {a.repeat} times over" if a.repeat > 1 else ""])
                print(f"| {lanes} lanes, lookahead {max(a.lookahead, group)}, group {group}, {judged} judged in the "
                      f"room{how} | {len(jobs)} | {wall:.1f} | {3600 * len(jobs) / wall:.0f} | {busy:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
