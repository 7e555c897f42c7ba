"""What a run leaves behind: DIR/best.py, a markdown report with the speedup-over-time plot and the best
candidate's lineage, a summary JSON and a JSONL export of every judged candidate."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from kernelrl.search.store import PENDING, CandidateRecord, Store
from kernelrl.task import Task


def write_report(store: Store, task: Task, out_dir: str | Path, run: dict | None = None) -> Path:
    """Write best.py, speedup.png, summary.json, candidates.jsonl and report.md into out_dir; returns report.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    best = store.best_candidates(task, 1)
    best_rec = best[0] if best else None
    if best_rec is not None:
        (out / "best.py").write_text(_best_header(best_rec) + best_rec.source)
    elif (out / "best.py").exists():
        (out / "best.py").unlink()
    plot = plot_speedups(store, task, out / "speedup.png")
    n_export = store.export_jsonl(out / "candidates.jsonl", task)
    stats = store.stats(task)
    summary = {"task": task.name, "task_id": task.digest, "stats": stats, "run": run or {},
               "best": _brief(best_rec) if best_rec else None, "exported": n_export}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    md = _markdown(store, task, best_rec, stats, run or {}, plot is not None)
    path = out / "report.md"
    path.write_text(md)
    return path


def speedup_series(store: Store, task: Task) -> list[tuple[int, float | None, float | None]]:
    """(evaluation number, speedup or None when it failed, best so far) in the order verdicts arrived."""
    series, best = [], None
    for i, e in enumerate(store.verdicts(task), 1):
        if e.status == "ok" and e.speedup is not None:
            best = e.speedup if best is None else max(best, e.speedup)
        series.append((i, e.speedup if e.status == "ok" else None, best))
    return series


def plot_speedups(store: Store, task: Task, path: Path) -> Path | None:
    """Speedup of each verified candidate and the best so far, against evaluation number; None if nothing ran."""
    series = speedup_series(store, task)
    if not series:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    ok = [(i, s) for i, s, _ in series if s is not None]
    failed = [i for i, s, _ in series if s is None]
    if ok:
        ax.scatter([i for i, _ in ok], [s for _, s in ok], s=18, label="verified candidate", zorder=3)
    best = [(i, b) for i, _, b in series if b is not None]
    if best:
        ax.step([i for i, _ in best], [b for _, b in best], where="post", color="C2", label="best so far")
    if failed:
        floor = min([s for _, s in ok] + [1.0]) * 0.9
        ax.scatter(failed, [floor] * len(failed), marker="x", color="C3", s=14, label="failed")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("evaluation")
    ax.set_ylabel("speedup over reference (×)")
    ax.set_title(f"{task.name}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _markdown(store: Store, task: Task, best: CandidateRecord | None, stats: dict, run: dict, plot: bool) -> str:
    lines = [f"# kernelrl optimize: {task.name}", ""]
    if task.meta.description:
        lines += [task.meta.description, ""]
    device = next((e.device for e in store.verdicts(task) if e.device), None)
    lines += ["| | |", "|---|---|",
              f"| best speedup | {_x(stats['best_speedup'])} |",
              f"| device | {device or '—'} |",
              f"| precision policy | {run.get('policy') or (best.verdict.policy if best and best.verdict else '—')} |",
              f"| candidates | {stats['candidates']} ({stats['llm_candidates']} from the LLM) |",
              f"| verdicts | {_statuses(stats['by_status'])} |",
              f"| tokens in / out | {stats['tokens_in']:,} / {stats['tokens_out']:,} |",
              f"| LLM cost | ${stats['cost_usd']:.4f} |"]
    if run.get("stop_reason"):
        lines.append(f"| stopped because | {run['stop_reason']} |")
    lines.append("")
    if plot:
        lines += ["![speedup over time](speedup.png)", ""]
    if best is None:
        lines += ["No candidate passed the evaluator yet, so there is no best.py.", ""]
    else:
        lines += ["## Best candidate", "",
                  f"Candidate {best.id} ({best.proposer}{', ' + best.model if best.model else ''}): "
                  f"**{_x(best.speedup)}**, written to `best.py`.", ""]
        v = best.verdict
        if v and v.reference and v.candidate_timing:
            lines += [f"Reference {v.reference.median_us:.1f} µs, candidate {v.candidate_timing.median_us:.1f} µs "
                      f"(median per call, {v.candidate_timing.method}).", ""]
        lines += ["### Lineage", "", "Each candidate lists the earlier variants its prompt showed.", ""]
        for level, rec in store.lineage(best.id):
            lines.append(f"{'  ' * level}- candidate {rec.id} · {rec.proposer} · {rec.status} · {_x(rec.speedup)}")
        lines.append("")
    top = store.best_candidates(task, 10)
    if top:
        lines += ["## Fastest verified candidates", "", "| candidate | proposer | speedup |", "|---|---|---|"]
        lines += [f"| {c.id} | {c.proposer} | {_x(c.speedup)} |" for c in top]
        lines.append("")
    failures = [c for c in store.candidates(task) if c.status not in ("ok", PENDING)][-8:]
    if failures:
        lines += ["## Recent failures", "", "| candidate | proposer | status | reason |", "|---|---|---|---|"]
        for c in failures:
            reason = (c.verdict.message if c.verdict else "").strip().splitlines()
            lines.append(f"| {c.id} | {c.proposer} | {c.status} | {_cell(reason[-1] if reason else '')} |")
        lines.append("")
    lines += ["Files: `best.py`, `store.sqlite` (the archive; resume by running the same command), "
              "`candidates.jsonl` (prompt, reply, verdict, reward per candidate), `summary.json`.", ""]
    return "\n".join(lines)


def _best_header(rec: CandidateRecord) -> str:
    return (f"# kernelrl optimize: candidate {rec.id} ({rec.proposer}), verified speedup {rec.speedup:.3f}x "
            f"on {rec.verdict.device if rec.verdict else '?'}\n")


def _brief(rec: CandidateRecord) -> dict:
    return {"id": rec.id, "proposer": rec.proposer, "model": rec.model, "speedup": rec.speedup,
            "digest": rec.digest, "device": rec.verdict.device if rec.verdict else None}


def _statuses(by_status: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in Counter(by_status).most_common()) or "none"


def _x(speedup: float | None) -> str:
    return f"{speedup:.3f}×" if speedup is not None else "—"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")[:160]
