"""How fast a `kernelrl redteam` run went, call by call, and where its GPU stage went: from its journal alone.

Usage: python benchmarks/redteam_pace.py JOURNAL [JOURNAL ...] [--gap S] [--out FILE]

Each JOURNAL is a red team's `redteam.jsonl` (or `redteam.jsonl.xz`, as benchmarks/results/redteam_<gpu>/ keeps it).
Its records carry the wall-clock time they were written (`at`); a pause longer than `--gap` seconds (default 120)
between two records starts another call (a resumed run). For each call, one row: its span (first record to last),
the tasks audited in it and the template verdicts judged, tasks per 100 s of the span, and the GPU stage's seconds
(the verdicts' `correctness`, `alone`, `timing`, `graphs`, `recheck` and `finish` phases, summed) and their share of
the span: near 100% a call is bound by its GPU stage (one GPU; on several, above); then that sum by phase (`alone`
is the wait for the work beside the GPU stage to end before timing, `recheck` the re-measurement of speedups above
3x in a fresh worker). Then the GPU stage a verdict by status, and its `correctness` and `finish` means. Markdown to stdout, or to `--out`.
"""
from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
from pathlib import Path

GPU_PHASES = ("correctness", "alone", "timing", "graphs", "recheck", "finish")


def records(journal: Path) -> list[dict]:
    """The journal's records that carry a time, in time order (a line cut short is skipped)."""
    opener = lzma.open if journal.suffix == ".xz" else open
    out = []
    with opener(journal, "rt") as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(r.get("at"), (int, float)):
                out.append(r)
    return sorted(out, key=lambda r: r["at"])


def calls(recs: list[dict], gap: float) -> list[list[dict]]:
    """The records split where more than `gap` seconds pass between two."""
    split: list[list[dict]] = []
    for r in recs:
        if split and r["at"] - split[-1][-1]["at"] <= gap:
            split[-1].append(r)
        else:
            split.append([r])
    return split


def gpu_stage(r: dict) -> float:
    return sum(r.get("phases", {}).get(k, 0.0) for k in GPU_PHASES)


def summarise(call: list[dict]) -> dict:
    """One call's pace and GPU stage."""
    span = call[-1]["at"] - call[0]["at"]
    audits = [r for r in call if r.get("kind") == "audit"]
    judged = [r for r in call if r.get("kind") == "template" and r.get("phases")]
    busy = sum(gpu_stage(r) for r in judged)
    by_status = {}
    for status in sorted({r["status"] for r in judged}):
        rs = [r for r in judged if r["status"] == status]
        by_status[status] = {"n": len(rs), "gpu_stage": statistics.fmean(gpu_stage(r) for r in rs),
                             "correctness": statistics.fmean(r["phases"].get("correctness", 0.0) for r in rs),
                             "finish": statistics.fmean(r["phases"].get("finish", 0.0) for r in rs)}
    return {"span_s": span, "policy": call[0].get("policy", ""), "first": audits[0]["task"] if audits else "",
            "last": audits[-1]["task"] if audits else "", "audits": len(audits), "judged": len(judged),
            "tasks_per_100s": 100 * len(audits) / span if span else 0.0, "gpu_stage_s": busy,
            "gpu_share": busy / span if span else 0.0, "by_status": by_status,
            "by_phase": {k: sum(r["phases"].get(k, 0.0) for r in judged) for k in GPU_PHASES}}


def table(named: list[tuple[str, dict]]) -> str:
    lines = ["| journal, call | policy | tasks audited | span | tasks / 100 s | verdicts | GPU stage | of the span | "
             f"by phase ({', '.join(GPU_PHASES)}) | GPU stage a verdict by status (correctness, finish) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, s in named:
        statuses = "; ".join(f"{k} {v['n']}: {v['gpu_stage']:.2f} s ({v['correctness']:.2f}, {v['finish']:.2f})"
                             for k, v in s["by_status"].items())
        tasks = f"{s['audits']} (`{s['first']}` … `{s['last']}`)" if s["audits"] else "0"
        lines.append(f"| {name} | {s['policy']} | {tasks} | {s['span_s']:.0f} s | {s['tasks_per_100s']:.1f} | "
                     f"{s['judged']} | {s['gpu_stage_s']:.0f} s | {s['gpu_share']:.0%} | "
                     f"{', '.join(f'{v:.0f}' for v in s['by_phase'].values())} | {statuses or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("journals", nargs="+", type=Path)
    ap.add_argument("--gap", type=float, default=120.0, help="seconds without a record that start another call")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    missing = [str(j) for j in a.journals if not j.is_file()]
    if missing:
        raise SystemExit(f"no such journal: {', '.join(missing)}")
    text = table([(f"{journal.parent.name} {i}", summarise(call)) for journal in a.journals
                  for i, call in enumerate(calls(records(journal), a.gap), 1)])
    a.out.write_text(text) if a.out else sys.stdout.write(text)


if __name__ == "__main__":
    main()
