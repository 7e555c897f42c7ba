"""Where a thread of a `kernelrl bench` process spends its time, from a py-spy recording of it.

Usage: python benchmarks/stage_profile.py RAW [--thread judge-] [--rate 100] [--top 30] [--depth 4]

RAW is `py-spy record --idle --threads --format raw` output (or `--gil`: the samples that held the interpreter
lock), plain or xz-compressed: one line per distinct stack, `thread (tid): name;frame;frame... count`. Prints, as
Markdown, the seconds (count / `--rate`, py-spy's `-r`) each thread whose name starts with `--thread` spent under
each chain of kernelrl's own frames (the innermost `--depth` of them, innermost first), and then the stacks where
it was not waiting (its innermost frame neither a poll nor a condition's wait) by their innermost frame: the GPU
stage's thread (`judge-cuda`) waits for its workers' replies, for the device, or for a prepared job, and works
between those waits.
"""
from __future__ import annotations

import argparse
import collections
import lzma
from pathlib import Path

WAITS = ("select", "Condition.wait", "_wait_for_tstate_lock", "Event.wait")


def read(path: Path) -> list[tuple[str, list[str], int]]:
    """(thread name, frames outermost first, samples) of each line of a raw recording."""
    data = path.read_bytes()
    text = (lzma.decompress(data) if path.suffix == ".xz" else data).decode()
    rows = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        rows.append((frames[0].partition("): ")[2] or frames[0], frames[1:], int(count)))
    return rows


def chains(rows, thread: str, depth: int) -> collections.Counter:
    """Samples of the threads named `thread*` by the innermost `depth` kernelrl frames (function names)."""
    out = collections.Counter()
    for name, frames, n in rows:
        if name.startswith(thread):
            own = [f.split(" (")[0] for f in frames if "kernelrl/" in f]
            out[" < ".join(own[::-1][:depth]) or "(outside kernelrl)"] += n
    return out


def working(rows, thread: str) -> collections.Counter:
    """Samples of the threads named `thread*` that were not waiting, by innermost frame (and kernelrl's line)."""
    out = collections.Counter()
    for name, frames, n in rows:
        if name.startswith(thread) and frames and not any(w in frames[-1] for w in WAITS):
            own = [f for f in frames if "kernelrl/" in f]
            at = own[-1].rpartition("kernelrl/")[2].rstrip(")") if own else ""
            out[(frames[-1].split(" (")[0], at)] += n
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--thread", default="judge-")
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--depth", type=int, default=4)
    a = ap.parse_args()
    rows = read(a.raw)
    by = chains(rows, a.thread, a.depth)
    total = sum(by.values())
    if not total:
        raise SystemExit(f"{a.raw}: no samples of a thread named {a.thread}*")
    print(f"{total / a.rate:.1f} s of threads named `{a.thread}*` ({total} samples at {a.rate:g} a second)\n")
    print("| seconds | share | kernelrl frames, innermost first |\n| ---: | ---: | --- |")
    for k, n in by.most_common(a.top):
        print(f"| {n / a.rate:.1f} | {100 * n / total:.1f}% | {k} |")
    busy = working(rows, a.thread)
    print(f"\nNot waiting: {sum(busy.values()) / a.rate:.1f} s\n")
    print("| seconds | innermost frame | at (kernelrl) |\n| ---: | --- | --- |")
    for (leaf, at), n in busy.most_common(a.top):
        print(f"| {n / a.rate:.1f} | {leaf} | {at} |")


if __name__ == "__main__":
    main()
