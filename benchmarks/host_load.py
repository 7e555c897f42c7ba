"""What keeps a machine's cores busy during a run, second by second, beside the GPU's utilisation.

Usage: python benchmarks/host_load.py OUT_JSONL [--interval 1.0] [--until-file PATH]     (sample until stopped)
       python benchmarks/host_load.py OUT_JSONL --summary                                  (summarise a sampling)

Every interval: the busy share of the cores this process may use (every process on them, as `kernelrl bench`
reads it for `runs.jsonl`'s `cpu_busy`), the core-seconds each program spent (`psutil`; compilers by name: cicc,
cudafe++, cc1plus, ptxas ..., Python processes as python, the `kernelrl` command's own apart; a process that ends
within an interval is missed for it), and the GPU's utilisation (`nvidia-smi`, where there is one).
It stops on SIGTERM or SIGINT, or when `--until-file` exists. `--summary` prints, as Markdown: the seconds sampled,
the mean busy share of the cores, the share of seconds they were 90% busy or more, the core-seconds by program, and
the cores' busy share over the seconds the GPU was idle (utilisation under 50%) against those it was busy.
"""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from kernelrl.bench.runs import cpu_busy, cpu_times  # noqa: E402


def process_seconds() -> dict[tuple[int, float], tuple[str, float]]:
    """(pid, start time) -> (program, user + system seconds) of every process readable now (`psutil`)."""
    out = {}
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times", "create_time"]):
        info = proc.info
        if info["cpu_times"] is None:  # gone, or not ours to read
            continue
        name = program(info["name"] or "?")
        if name == "python" and "kernelrl.cli" in (info["cmdline"] or []):  # the command, apart from its workers
            name = "python (kernelrl command)"
        out[(proc.pid, info["create_time"])] = (name, info["cpu_times"].user + info["cpu_times"].system)
    return out


def program(comm: str) -> str:
    if comm.startswith(("python", "pt_", "kernelrl")):
        return "python"
    return comm.split("/")[0] if comm.startswith("kworker") else comm


def gpu_util() -> float | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5, check=False).stdout.split()
        return sum(float(x) for x in out) / len(out) if out else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def sample(out: Path, interval: float, until: Path | None) -> None:
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    cores0, procs0 = cpu_times(), process_seconds()
    t0 = time.monotonic()
    with out.open("a") as f:
        while not stop and not (until and until.exists()):
            time.sleep(interval)
            cores1, procs1 = cpu_times(), process_seconds()
            by = collections.Counter()
            for key, (name, secs) in procs1.items():
                by[name] += secs - procs0.get(key, (name, 0.0))[1]  # a process started since: all of its time
            row = {"t": round(time.monotonic() - t0, 2), "cores": len(cores1), "busy": cpu_busy(cores0, cores1) or 0.0,
                   "by": {k: round(v, 2) for k, v in by.most_common() if v > 0}, "gpu": gpu_util()}
            f.write(json.dumps(row) + "\n")
            f.flush()
            cores0, procs0 = cores1, procs1


def summary(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return f"{path}: no samples\n"
    n = len(rows)
    by = collections.Counter()
    for r in rows:
        by.update(r["by"])
    total = sum(by.values())
    mean, full = sum(r["busy"] for r in rows) / n, sum(r["busy"] >= 0.9 for r in rows) / n
    lines = [(f"{n} samples over {rows[-1]['t']:.0f} s, {rows[0]['cores']} cores: busy {mean:.0%} on average, "
              f"90% busy or more in {full:.0%} of the samples"), ""]
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
