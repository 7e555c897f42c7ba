"""`kernelrl bench TASKS_DIR --candidates CANDS_DIR`: evaluate a suite's candidates and print fast_p tables."""
from __future__ import annotations

import json
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelrl.bench.metrics import FAST_P, Summary, best_of_samples_line, kernelbench_rule_line
from kernelrl.bench.result import BASELINES, TaskResult
from kernelrl.scale import RAY_HELP, check_group
from kernelrl.task import POLICY_HELP

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
    policy: str = typer.Option("strict", help=POLICY_HELP),
    level: List[str] = typer.Option([], "--level", "-l", help="run only this level (1, level1 or level_1); "
                                                              "repeat for several"),
    samples: str = typer.Option("lowest", help="which of a task's samples to judge, where candidates are named as "
                                               "KernelBench's generation runs name them (level_1_problem_12_sample_3_"
                                               "kernel.py): lowest, or all (a group per task, judged in order)"),
    resume: bool = typer.Option(False, "--resume", help="keep the finished results in --out's results.jsonl and "
                                                        "run only the rest (the report covers both)"),
    time_limit: Optional[float] = typer.Option(None, help="start no task after this many seconds (finish with "
                                                          "--resume)"),
    ray: Optional[str] = typer.Option(None, "--ray", help=RAY_HELP + "; --device is then ignored and reference "
                                                                     "timings are not cached"),
    early_first_call: bool = typer.Option(True, "--early-first-call/--no-early-first-call",
                                          help="CUDA: make each candidate's first call (its torch.compile or "
                                               "Triton compilation) while it is prepared, beside untimed work"),
    cpu_lanes: Optional[int] = typer.Option(None, "--cpu-lanes", help="jobs prepared at once (workers started, "
                                            "candidates built) for the devices to judge (default: three of every "
                                            "four cores this process may use, at most 12 a device)"),
    first_call_lanes: int = typer.Option(0, "--first-call-lanes", help="CUDA: threads a device that make built "
                                         "candidates' first calls, so that a CPU lane goes on to the next job "
                                         "meanwhile (0: the lane that built it makes it)"),
    references_ahead: bool = typer.Option(False, "--references-ahead", help="start the next task's reference "
                                          "while this task's candidates are prepared, instead of when its own "
                                          "candidates are"),
    group: int = typer.Option(1, "--group", help="judge up to this many prepared candidates of one task together "
                                                "(with --samples all: a GRPO group), the reference timed once a "
                                                "round beside each of them"),
    exclude_flagged: Optional[Path] = typer.Option(None, "--exclude-flagged", help="drop the tasks a `kernelrl "
                                                   "redteam` report of this folder (its redteam.json) flagged"),
):
    """Evaluate every task's candidate and report fast_p, speedups and status counts, per level and overall."""
    from kernelrl.bench.baselines import BaselineCache, device_name
    from kernelrl.bench.report import summary_dict, write_report
    from kernelrl.bench.resume import RESULTS_FILE, ResultLog, result_key
    from kernelrl.bench.runner import BenchConfig, run_suite
    from kernelrl.bench.runs import append_run, cpu_busy, cpu_times, run_record
    from kernelrl.bench.suite import SuiteError, discover, select_levels
    from kernelrl.evaluate import EvalConfig, EvaluationError, check_device
    from kernelrl.scale.ray_backend import RayUnavailable  # imports Ray only when a RayScheduler is made
    from kernelrl.task import check_policy

    if baseline not in BASELINES:
        _fail(f"--baseline must be one of {', '.join(BASELINES)}, not {baseline!r}")
    if timeout <= 0 or trials < 1 or rounds < 1 or calls < 1:
        _fail("--timeout, --trials, --rounds and --calls must be positive")
    if cpu_lanes is not None and cpu_lanes < 1:
        _fail(f"--cpu-lanes must be at least 1, not {cpu_lanes}")
    if cpu_lanes is not None and ray is not None:
        _fail("--cpu-lanes sets this machine's lanes; with --ray each GPU's actor sets its own: leave one out")
    if first_call_lanes < 0:
        _fail(f"--first-call-lanes must be 0 or more, not {first_call_lanes}")
    if (first_call_lanes or references_ahead) and ray is not None:
        _fail("--first-call-lanes and --references-ahead set this machine's lanes; with --ray each GPU's actor sets "
              "its own: leave them out")
    try:
        check_group(group, ray)
    except ValueError as e:
        _fail(f"--{e}")
    if time_limit is not None and time_limit <= 0:
        _fail("--time-limit must be positive")
    if resume and out is None:
        _fail("--resume needs --out (the folder whose results.jsonl holds the finished tasks)")
    try:
        check_policy(policy)
    except ValueError as e:
        _fail(f"--{e}")
    devices = _devices(device) if ray is None else (f"ray:{ray}",)
    try:
        for d in devices if ray is None else ():
            check_device(d)
        whole = discover(tasks_dir, candidates, samples=samples)
        suite = select_levels(whole, level) if level else whole
        if exclude_flagged is not None:
            suite = _without_flagged(suite, exclude_flagged)
    except (EvaluationError, SuiteError) as e:
        _fail(str(e))
    for rel, why in whole.skipped:
        err.print(f"[yellow]skipped[/] {rel}: {why}", highlight=False)

    eval_cfg = EvalConfig(timeout_s=timeout, build_timeout_s=min(timeout, 240.0), correctness_trials=trials,
                          timing_rounds=rounds, calls_per_round=calls, policy=policy,
                          early_first_call=early_first_call, **({"cache_dir": str(cache_dir)} if cache_dir else {}))
    keys = {st.id: result_key(st, eval_cfg.policy_for(st.task.meta), baseline) for st in whole.tasks}
    log = ResultLog(out / RESULTS_FILE) if out is not None else None
    done = log.load() if log is not None and resume else {}
    if log is not None and not resume:
        log.reset()
    todo = [st for st in suite.tasks if keys[st.id] not in done]
    if done:
        err.print(f"resuming: {len(suite.tasks) - len(todo)} of {len(suite.tasks)} tasks already finished in "
                  f"{log.path}", highlight=False)
    config = BenchConfig(devices=devices, baseline=baseline, eval=eval_cfg, time_references=references,
                         compiled_references=compiled_references, use_cache=not fresh, ray=ray, cpu_lanes=cpu_lanes,
                         group=group, first_call_lanes=first_call_lanes, references_ahead=references_ahead)
    cache = BaselineCache(eval_cfg.cache_path / "bench" / "baselines.sqlite")
    with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[load]}"), TextColumn("{task.description}"), console=err,
                  transient=False) as progress:
        bar = progress.add_task("", total=len(todo), load="")

        finished = []  # this run's results so far: what an interrupted run records

        def advance(r: TaskResult):
            finished.append(r)
            if log is not None:
                log.append(keys[r.id], r)
            progress.update(bar, advance=1, description=f"{r.id}: {r.status}{_speed(r.speedup)}")

        deadline = time.monotonic() + time_limit if time_limit is not None else None
        seen = []  # the scheduler's latest stats: the run's device busy fraction

        def stats(s):
            seen[:] = [s]
            progress.update(bar, load=scheduler_line(s))

        t0, started, cpu0 = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%S"), cpu_times()
        interrupted = False
        try:  # a run stopped by SIGTERM (as `timeout` stops it) or Ctrl-C still records what it judged
            with _terminate_as_interrupt():
                fresh_results = run_suite(replace(suite, tasks=tuple(todo)), config, cache, on_result=advance,
                                          deadline=deadline, on_stats=stats)
        except (EvaluationError, RayUnavailable) as e:
            _fail(str(e))
        except KeyboardInterrupt:
            fresh_results, interrupted = list(finished), True
    if out is not None and fresh_results:
        record = run_record(started, time.monotonic() - t0, fresh_results, seen[0].device_busy if seen else {})
        record.update(cpu_busy=cpu_busy(cpu0, cpu_times()), cores=len(cpu0))
        if group > 1:
            record["group"] = group
        append_run(out, dict(record, interrupted=True) if interrupted else record)
    if len(fresh_results) < len(todo):
        err.print(f"[yellow]time limit:[/] {len(todo) - len(fresh_results)} tasks not started; run again with "
                  "--resume to finish them", highlight=False)
    # The report covers every task of the suite with a result: this run's and, with --resume, earlier ones.
    new = {r.id: r for r in fresh_results}
    results = [new.get(st.id) or done.get(keys[st.id]) for st in whole.tasks]
    results = [r for r in results if r is not None]
    summary = summary_dict(results, baseline, devices=devices, suite=str(tasks_dir),
                           device_names=tuple(dict.fromkeys(device_name(d) for d in devices)) if ray is None
                           else (f"Ray cluster {ray}",), policy=policy,
                           skipped=whole.skipped)
    print_summary(summary, console=err if json_out else Console(width=max(Console().width, 132)))
    if out is not None:
        paths = write_report(results, summary, out)
        err.print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
    if interrupted:
        err.print(f"[yellow]interrupted:[/] {len(fresh_results)} tasks judged and recorded; run again with --resume "
                  "to finish the rest", highlight=False)
        raise typer.Exit(130)


@contextmanager
def _terminate_as_interrupt():
    """SIGTERM raises KeyboardInterrupt in the main thread while the block runs (the previous handler after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


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
    if summary.get("best_of_samples"):
        console.print(best_of_samples_line(summary["best_of_samples"]), highlight=False)
    if summary.get("kernelbench_rule"):
        console.print(kernelbench_rule_line(summary["kernelbench_rule"], summary["total"]), highlight=False)


def scheduler_line(s) -> str:
    """'queued 12 · 9.8/min · busy cuda:0 86%': a scheduler's progress (SchedulerStats) on one line."""
    busy = " ".join(f"{d} {100 * b:.0f}%" for d, b in s.device_busy.items())
    return f"queued {s.queued} · {s.verdicts_per_minute:.1f}/min · busy {busy}"


def _devices(values: list[str]) -> tuple[str, ...]:
    devices = [d.strip() for v in values for d in v.split(",") if d.strip()]
    if devices:
        return tuple(dict.fromkeys(devices))
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return tuple(f"cuda:{i}" for i in range(n)) or ("cpu",)


def _without_flagged(suite, report: Path):
    """`suite` without the tasks a red-team report (`kernelrl redteam`'s redteam.json, its "flagged" list) names."""
    from kernelrl.bench.suite import SuiteError

    try:
        flagged = set(json.loads(report.read_text())["flagged"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SuiteError(f"{report}: not a red-team report (kernelrl redteam writes redteam.json in its --out): "
                         f"{type(e).__name__}: {e}") from e
    kept = tuple(t for t in suite.tasks if t.name not in flagged)
    err.print(f"excluded {len(suite.tasks) - len(kept)} tasks that {report} flagged", highlight=False)
    return replace(suite, tasks=kept)


def _speed(v: float | None, plain: bool = False) -> str:
    if v is None:
        return "" if not plain else "-"
    return f"{v:.2f}×" if plain else f" {v:.2f}×"


def _fail(message: str, code: int = 2):
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # messages may hold [brackets]
    raise typer.Exit(code)
