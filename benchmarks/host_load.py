"""What keeps a machine's cores busy during a run, second by second, beside the GPU's utilisation.

Usage: python benchmarks/host_load.py OUT_JSONL [--interval 1.0] [--until-file PATH]     (sample until stopped)
       python benchmarks/host_load.py OUT_JSONL --summary                                  (summarise a sampling)

Every interval: the busy share of the cores this process may use (every process on them, from /proc/stat), the
core-seconds each program name spent (from each process's /proc/PID/stat; compilers by name: cicc, cudafe++,
cc1plus, ptxas ..., Python processes as python, the `kernelrl` command's own apart; a process that ends within an interval is missed for it), and the GPU's utilisation (`nvidia-smi`, where there is one).
It stops on SIGTERM or SIGINT, or when `--until-file` exists. `--summary` prints, as Markdown: the seconds sampled,
the mean busy share of the cores, the share of seconds they were 90% busy or more, the core-seconds by program, and
the cores' busy share over the seconds the GPU was idle (utilisation under 50%) against those it was busy.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def core_times(which: list[int]) -> tuple[int, int]:
    """(busy, total) clock ticks of the cores `which`, summed, from /proc/stat (guest time is in user time)."""
    busy = total = 0
    want = {f"cpu{c}" for c in which}
    with open("/proc/stat") as f:
        for line in f:
            name, *vals = line.split()
            if name not in want:
                continue
            v = [int(x) for x in vals[:8]]
            idle = v[3] + v[4]  # idle, iowait
            total += sum(v)
            busy += sum(v) - idle
    return busy, total


def process_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (program name, user + system ticks) of every process readable now."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = program(raw[raw.index("(") + 1:raw.rindex(")")])
        if name == "python":  # the command the run was started with, apart from its workers and compilers
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if b"kernelrl.cli" in f.read():
                        name = "python (kernelrl command)"
            except OSError:
                continue
        rest = raw[raw.rindex(")") + 2:].split()
        out[int(entry.name)] = (name, int(rest[11]) + int(rest[12]))
    return out


def program(comm: str) -> str:
    if comm.startswith("python") or comm.startswith("pt_") or comm.startswith("kernelrl"):
        return "python"
    return comm.split("/")[0] if comm.startswith("kworker") else comm


def gpu_util() -> float | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5).stdout.split()
        return sum(float(x) for x in out) / len(out) if out else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def sample(out: Path, interval: float, until: Path | None) -> None:
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    which = cores()
    busy0, total0 = core_times(which)
    ticks0 = process_ticks()
    t0 = time.monotonic()
    with out.open("a") as f:
        while not stop and not (until and until.exists()):
            time.sleep(interval)
            busy1, total1 = core_times(which)
            ticks1 = process_ticks()
            by = collections.Counter()
            for pid, (name, t) in ticks1.items():
                before = ticks0.get(pid, (name, 0))[1]
                by[name] += t - before if t >= before else t  # less than before: the pid was reused
            row = {"t": round(time.monotonic() - t0, 2), "cores": len(which),
                   "busy": round((busy1 - busy0) / max(total1 - total0, 1), 4),
                   "by": {k: round(v / TICK, 2) for k, v in by.most_common() if v > 0},
                   "gpu": gpu_util()}
            f.write(json.dumps(row) + "\n")
            f.flush()
            busy0, total0, ticks0 = busy1, total1, ticks1


def summary(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return f"{path}: no samples\n"
    n = len(rows)
    by = collections.Counter()
    for r in rows:
        by.update(r["by"])
    total = sum(by.values())
    lines = [f"{n} samples over {rows[-1]['t']:.0f} s, {rows[0]['cores']} cores: busy {sum(r['busy'] for r in rows) / n:.0%}"
             f" on average, 90% busy or more in {sum(r['busy'] >= 0.9 for r in rows) / n:.0%} of the samples", ""]
    gpu = [r for r in rows if r.get("gpu") is not None]
    if gpu:
        idle, working = [r for r in gpu if r["gpu"] < 50], [r for r in gpu if r["gpu"] >= 50]
        for what, rs in (("idle (under 50%)", idle), ("busy (50% or more)", working)):
            if rs:
                lines.append(f"- GPU {what} in {len(rs) / len(gpu):.0%} of the samples; the cores were "
                             f"{sum(r['busy'] for r in rs) / len(rs):.0%} busy then")
        lines.append("")
    lines += ["| program | core-seconds | share |", "| --- | ---: | ---: |"]
    for name, s in by.most_common(12):
        lines.append(f"| {name} | {s:.0f} | {s / total:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--until-file", type=Path)
    ap.add_argument("--summary", action="store_true")
    a = ap.parse_args(argv)
    if a.interval <= 0:
        ap.error(f"--interval must be positive, not {a.interval}")
    if a.summary:
        if not a.out.is_file():
            ap.error(f"{a.out}: no such sampling")
        print(summary(a.out), end="")
    else:
        sample(a.out, a.interval, a.until_file)


if __name__ == "__main__":
    main()
