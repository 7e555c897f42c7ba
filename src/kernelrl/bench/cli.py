"""`kernelrl bench TASKS_DIR --candidates CANDS_DIR`: evaluate a suite's candidates and print fast_p tables."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelrl.bench.metrics import FAST_P, Summary
from kernelrl.bench.result import BASELINES, TaskResult

err = Console(stderr=True, width=max(Console(stderr=True).width, 132))


def bench_command(
    tasks_dir: Path = typer.Argument(..., help="folder of KernelBench-format references (levels from level1/ ...)"),
    candidates: Optional[Path] = typer.Option(None, "--candidates", "-c",
                                              help="folder of candidates (ModelNew), matched by relative path "
                                                   "or file name; a task without one counts as not solved"),
    device: List[str] = typer.Option([], "--device", "-d",
                                     help="cpu, cuda or cuda:N; repeat or comma-separate for several "
                                          "(default: every CUDA device, else cpu)"),
    baseline: str = typer.Option("eager", help="what speedups and fast_p are measured against: eager|compile"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary object on stdout"),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="write summary.json, results.csv, report.md and speedups.png here"),
    timeout: float = typer.Option(300.0, help="seconds for one candidate's evaluation, build included"),
    trials: int = typer.Option(5, help="correctness trials per candidate (fresh secret seeds each)"),
    rounds: int = typer.Option(5, help="timing rounds (reference and candidate alternate)"),
    calls: int = typer.Option(20, help="timed calls per program per round"),
    compiled_references: bool = typer.Option(False, "--time-compiled",
                                             help="also time torch.compile'd references (always with "
                                                  "--baseline compile)"),
    references: bool = typer.Option(True, "--time-references/--no-time-references",
                                    help="time references that have no candidate too"),
    fresh: bool = typer.Option(False, "--fresh-baselines", help="re-time references even when cached"),
    cache_dir: Optional[Path] = typer.Option(None, help="cache folder (default: $KERNELRL_CACHE or "
                                                        "~/.cache/kernelrl)"),
):
    """Evaluate every task's candidate and report fast_p, speedups and status counts, per level and overall."""
    from kernelrl.bench.baselines import BaselineCache, device_name
    from kernelrl.bench.report import summary_dict, write_report
    from kernelrl.bench.runner import BenchConfig, run_suite
    from kernelrl.bench.suite import SuiteError, discover
    from kernelrl.evaluate import EvalConfig, EvaluationError, check_device

    if baseline not in BASELINES:
        _fail(f"--baseline must be one of {', '.join(BASELINES)}, not {baseline!r}")
    if timeout <= 0 or trials < 1 or rounds < 1 or calls < 1:
        _fail("--timeout, --trials, --rounds and --calls must be positive")
    devices = _devices(device)
    try:
        for d in devices:
            check_device(d)
        suite = discover(tasks_dir, candidates)
    except (EvaluationError, SuiteError) as e:
        _fail(str(e))
    for rel, why in suite.skipped:
        err.print(f"[yellow]skipped[/] {rel}: {why}", highlight=False)

    eval_cfg = EvalConfig(timeout_s=timeout, build_timeout_s=min(timeout, 240.0), correctness_trials=trials,
                          timing_rounds=rounds, calls_per_round=calls,
                          **({"cache_dir": str(cache_dir)} if cache_dir else {}))
    config = BenchConfig(devices=devices, baseline=baseline, eval=eval_cfg, time_references=references,
                         compiled_references=compiled_references, use_cache=not fresh)
    cache = BaselineCache(eval_cfg.cache_path / "bench" / "baselines.sqlite")
    with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=False) as progress:
        bar = progress.add_task("", total=len(suite.tasks))

        def advance(r: TaskResult):
            progress.update(bar, advance=1, description=f"{r.task}: {r.status}{_speed(r.speedup)}")

        try:
            results = run_suite(suite, config, cache, on_result=advance)
        except EvaluationError as e:
            _fail(str(e))
    summary = summary_dict(results, baseline, devices=devices, suite=str(tasks_dir),
                           device_names=tuple(dict.fromkeys(device_name(d) for d in devices)))
    print_summary(summary, console=err if json_out else Console(width=max(Console().width, 132)))
    if out is not None:
        paths = write_report(results, summary, out)
        err.print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")


def print_summary(summary: dict, console: Console) -> None:
    """fast_p and speedup statistics per level and overall, and counts by status, as a rich table."""
    t = Table(title=f"fast_p over the {summary['baseline']} baseline", title_justify="left")
    for col in ["level", "tasks", "correct"] + [f"fast_{p:g}" for p in FAST_P] + ["geomean", "mean", "median"]:
        t.add_column(col, justify="left" if col == "level" else "right")
    rows = [(lvl or "(top)", Summary.from_dict(s)) for lvl, s in summary["levels"].items()]
    rows.append(("all", Summary.from_dict(summary)))
    for i, (lvl, s) in enumerate(rows):
        t.add_row(lvl, str(s.total), str(s.correct), *[f"{s.fast_p.get(p, 0.0):.2f}" for p in FAST_P],
                  *[_speed(v, plain=True) for v in (s.geomean_speedup, s.mean_speedup, s.median_speedup)],
                  end_section=i == len(rows) - 2)
    console.print(t)
    console.print("status: " + ", ".join(f"{k} {v}" for k, v in summary["counts"].items()), highlight=False)


def _devices(values: list[str]) -> tuple[str, ...]:
    devices = [d.strip() for v in values for d in v.split(",") if d.strip()]
    if devices:
        return tuple(dict.fromkeys(devices))
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return tuple(f"cuda:{i}" for i in range(n)) or ("cpu",)


def _speed(v: float | None, plain: bool = False) -> str:
    if v is None:
        return "" if not plain else "-"
    return f"{v:.2f}×" if plain else f" {v:.2f}×"


def _fail(message: str, code: int = 2):
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)
