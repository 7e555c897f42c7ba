"""Bench outputs: the JSON summary, a CSV of task results, a markdown report and a speedup plot."""
from __future__ import annotations

import csv
import json
import math
import platform
import random
from pathlib import Path

import torch

import kernelrl
from kernelrl.bench.metrics import (FAST_P, Summary, best_of_samples, best_of_samples_line, by_level,
                                    input_independent, kernelbench_rule, kernelbench_rule_line, summarize,
                                    without_absolute_slack)
from kernelrl.bench.result import TaskResult

CSV_FIELDS = ("task", "sample", "level", "status", "speedup", "eager_speedup", "compile_speedup", "reference_us",
              "reference_compiled_us", "candidate_us", "method", "device", "policy", "candidate", "message")


def software() -> dict:
    """The versions a run's numbers depend on."""
    return {"kernelrl": kernelrl.__version__, "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version()}


def summary_dict(results: list[TaskResult], baseline: str, devices: tuple[str, ...] = (),
                 suite: str = "", device_names: tuple[str, ...] = (), policy: str = "strict",
                 skipped: tuple[tuple[str, str], ...] = ()) -> dict:
    """The one JSON object a bench run reports: overall metrics, per-level metrics, per-task results, the suite's
    files that could not be loaded as references (`skipped`: relative path and reason) and, where any task was
    judged under the kernelbench policy, `kernelbench_rule` (tasks under it, correct, correct without absolute
    slack); where every sample of a task was judged, `best_of_samples`: the metrics over each task's best
    candidate, overall and per level."""
    overall = summarize(results)
    d = overall.to_dict()
    d.update(
        baseline=baseline, suite=suite, devices=list(devices), device_names=list(device_names), software=software(),
        policy=policy, task_policies={r.task: r.policy for r in results if r.policy and r.policy != policy},
        levels={lvl: s.to_dict() for lvl, s in by_level(results).items()},
        tasks=[r.to_dict() for r in results],
        skipped=[{"file": rel, "reason": why} for rel, why in skipped],
    )
    rule = kernelbench_rule(results)
    if rule is not None:
        d["kernelbench_rule"] = rule
    if any(r.sample is not None for r in results):
        best = best_of_samples(results)
        d["best_of_samples"] = dict(summarize(best).to_dict(),
                                    levels={lvl: s.to_dict() for lvl, s in by_level(best).items()})
    return d


def write_json(summary: dict, path: Path) -> Path:
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def write_csv(results: list[TaskResult], path: Path) -> Path:
    """One row per task (speedups as plain numbers, times in µs)."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in results:
            row = r.to_dict()
            w.writerow({k: "" if row.get(k) is None else row[k] for k in CSV_FIELDS})
    return path


def plot_speedups(results: list[TaskResult], path: Path, baseline: str) -> Path:
    """Speedups of correct candidates per level (log scale, one dot per task, box per level) as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    levels = list(by_level(results))
    fig = Figure(figsize=(max(4.0, 1.6 * len(levels) + 2), 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    jitter = random.Random(0)
    data = []
    for i, lvl in enumerate(levels):
        ys = [r.speedup for r in results if r.level == lvl and r.correct and r.speedup]
        data.append(ys)
        if ys:
            ax.scatter([i + jitter.uniform(-0.12, 0.12) for _ in ys], ys, s=18, alpha=0.8, zorder=3)
    if any(data):
        ax.boxplot([d if d else [math.nan] for d in data], positions=range(len(levels)), widths=0.5,
                   showfliers=False)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(levels)))
    ax.set_xticklabels([_level_label(lvl) for lvl in levels])
    ax.set_xlim(-0.6, len(levels) - 0.4)
    ax.set_ylabel(f"speedup over {baseline} reference (×)")
    counts = [f"{_level_label(lvl)}: {len(d)} correct" for lvl, d in zip(levels, data)]
    ax.set_title("Speedup of correct candidates per level\n" + ", ".join(counts), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def markdown(summary: dict, results: list[TaskResult], plot_name: str | None = None) -> str:
    """The bench report as markdown: metrics per level, status counts, per-task table."""
    baseline = summary["baseline"]
    lines = [f"# Bench report: {summary.get('suite') or 'suite'}", ""]
    devs = ", ".join(summary.get("device_names") or summary.get("devices") or [])
    sw = summary.get("software", {})
    own = summary.get("task_policies") or {}
    lines += [f"Devices: {devs or '?'} · torch {sw.get('torch')} (CUDA {sw.get('cuda')}) · kernelrl "
              f"{sw.get('kernelrl')} · baseline: **{baseline}** · precision policy: "
              f"**{summary.get('policy', 'strict')}**" + (f" ({len(own)} tasks set their own)" if own else ""), ""]
    lines += ["fast_p = share of all tasks whose candidate is correct and more than p× faster than the "
              "baseline; speedup statistics are over correct candidates. Times are medians per call by each "
              "task's method: cuda_graph is device time (both programs replayed from CUDA graphs), cuda_events "
              "and perf_counter are per-call latency.", ""]
    head = ["level", "tasks", "correct"] + [f"fast_{p:g}" for p in FAST_P] + ["geomean", "mean", "median"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [(lvl, Summary.from_dict(s)) for lvl, s in summary["levels"].items()]
    rows.append(("all", Summary.from_dict(summary)))
    for lvl, s in rows:
        cells = [_level_label(lvl), str(s.total), str(s.correct)]
        cells += [f"{s.fast_p.get(p, 0.0):.2f}" for p in FAST_P]
        cells += [_x(s.geomean_speedup), _x(s.mean_speedup), _x(s.median_speedup)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Status counts: " + ", ".join(f"{k} {v}" for k, v in summary["counts"].items()), ""]
    if summary.get("best_of_samples"):
        lines += [best_of_samples_line(summary["best_of_samples"]) + ". The rows above count every candidate of "
                  "every task (`task#sample` below).", ""]
    if summary.get("kernelbench_rule"):
        rule = kernelbench_rule_line(summary["kernelbench_rule"], summary["total"])
        lines += [rule[0].upper() + rule[1:] + ". Without absolute slack: no output passed only through "
                  "KernelBench's absolute tolerance (no `absolute_slack` warning on the verdict).", ""]
    constant = [r.task for r in results if input_independent(r)]
    if constant:
        lines += [f"Tasks whose output does not depend on their inputs (a constant program solves them; their "
                  f"verdicts carry a `task_property` warning): {', '.join(constant)}.", ""]
    if plot_name:
        lines += [f"![speedup per level]({plot_name})", ""]
    if summary.get("skipped"):
        lines += ["## Files not loaded as references", "", "| file | reason |", "|---|---|"]
        lines += [f"| {s['file']} | {s['reason'].replace('|', chr(92) + '|')} |" for s in summary["skipped"]]
        lines += [""]
    lines += ["## Tasks", "",
              "| task | status | speedup | vs eager | vs compile | eager ref (µs) | compiled ref (µs) | "
              "candidate (µs) | method | note |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        note = (r.message or "").replace("|", "\\|").replace("\n", " ")[:120]
        if r.task in own:
            note = f"{own[r.task]} policy; {note}"
        if r.correct and not without_absolute_slack(r):
            note = "absolute slack" + (f"; {note}" if note else "")
        if input_independent(r):
            note = "output independent of the inputs" + (f"; {note}" if note else "")
        lines.append(f"| {r.id} | {r.status} | {_x(r.speedup)} | {_x(r.eager_speedup)} | "
                     f"{_x(r.compile_speedup)} | {_us(r.reference_us)} | {_us(r.reference_compiled_us)} | "
                     f"{_us(r.candidate_us)} | {r.method or ''} | {note} |")
    return "\n".join(lines) + "\n"


def write_report(results: list[TaskResult], summary: dict, out_dir: Path) -> dict[str, Path]:
    """summary.json, results.csv, speedups.png and report.md under `out_dir`; their paths by kind."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": write_json(summary, out_dir / "summary.json"),
             "csv": write_csv(results, out_dir / "results.csv"),
             "plot": plot_speedups(results, out_dir / "speedups.png", summary["baseline"])}
    md = out_dir / "report.md"
    md.write_text(markdown(summary, results, plot_name=paths["plot"].name))
    paths["markdown"] = md
    return paths


def _level_label(level: str) -> str:
    return level or "(top)"


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}×"


def _us(v: float | None) -> str:
    return "" if v is None else f"{v:.1f}"
