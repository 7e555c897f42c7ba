"""`kernelrl redteam TASKS_DIR`: the known hacks and a task audit against every task of a set, judged by the real
evaluator; exit status 1 when a hole is found."""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelrl.task import POLICY_HELP

err = Console(stderr=True, soft_wrap=True)


def redteam_command(
    tasks_dir: Path = typer.Argument(..., help="folder of KernelBench-format references (found as `kernelrl bench` "
                                               "finds them)"),
    policy: str = typer.Option("strict", help=POLICY_HELP),
    device: List[str] = typer.Option([], "--device", "-d", help="cpu, cuda or cuda:N; repeat or comma-separate "
                                                                "GPUs to share the jobs (default: every CUDA device, "
                                                                "else cpu)"),
    out: Path = typer.Option(Path("runs/redteam"), "--out", "-o", help="the journal, report.md, redteam.json and "
                                                                       "cases/ (every hole as a regression case)"),
    json_out: bool = typer.Option(False, "--json", help="print the report as one JSON object on stdout"),
    templates: Optional[str] = typer.Option(None, "--templates", "-t", help="comma-separated template names, or "
                                                                            "'none' (default: all)"),
    level: List[str] = typer.Option([], "--level", "-l", help="only this level (1, level1 or level_1); repeat for "
                                                              "several"),
    resume: bool = typer.Option(False, "--resume", help="keep the work --out's journal holds and do only the rest"),
    redo: List[str] = typer.Option([], "--redo", help="with --resume: drop this task's records (a name as the report "
                                                      "gives it) and do its work again; repeat for several"),
    reaudit: bool = typer.Option(False, "--reaudit", help="with --resume: audit again the tasks an older audit than "
                                                          "this kernelrl's audited (the report lists them), keeping "
                                                          "their verdicts"),
    audit_lanes: int = typer.Option(1, "--audit-lanes", help="CUDA: tasks audited at once (each holds its reference "
                                                             "and draws in device memory)"),
    report_only: bool = typer.Option(False, "--report-only", help="judge nothing: write the report of --out's journal "
                                                                  "(a run stopped before it wrote one)"),
    time_limit: Optional[float] = typer.Option(None, help="start no task (and no LLM call) after this many seconds; "
                                                          "finish with --resume"),
    timeout: float = typer.Option(300.0, help="seconds for one candidate's evaluation, build included"),
    trials: int = typer.Option(5, help="correctness trials per candidate"),
    rounds: int = typer.Option(3, help="timing rounds per candidate that passes its trials"),
    calls: int = typer.Option(10, help="timed calls per program per round"),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="LLM hacker: a model behind any "
                                                                    "OpenAI-compatible endpoint"),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="the endpoint (default: $OPENAI_BASE_URL)"),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="environment variable holding the key"),
    attempts: int = typer.Option(3, help="LLM attempts per task (a task's attempts end at its first hole)"),
    budget: Optional[float] = typer.Option(None, "--budget", help="start no LLM call once this much USD is spent "
                                                                  "(needs --price-in/--price-out)"),
    price_in: float = typer.Option(0.0, "--price-in", help="USD per million input tokens"),
    price_out: float = typer.Option(0.0, "--price-out", help="USD per million output tokens"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="reply token limit"),
    concurrency: int = typer.Option(1, "--concurrency", help="tasks the LLM hacks at once"),
    cpu_lanes: Optional[int] = typer.Option(None, "--cpu-lanes", help="CUDA: jobs prepared at once (workers "
                                            "started, candidates built) for the GPUs to judge (default: three of "
                                            "every four cores this process may use, at most 12 a GPU)"),
):
    """Find the holes in a task set before a policy does: every known hack, written for each task, judged by the
    evaluator; and an audit of each task for outputs a trivial program produces."""
    from kernelrl.bench.suite import SuiteError, discover, select_levels
    from kernelrl.evaluate import EvalConfig, EvaluationError, check_device
    from kernelrl.redteam.journal import JOURNAL, Journal
    from kernelrl.redteam.report import has_holes, summarise, write
    from kernelrl.redteam.run import RedTeam, RunConfig
    from kernelrl.redteam.templates import select
    from kernelrl.task import check_policy

    if timeout <= 0 or trials < 1 or rounds < 1 or calls < 1 or attempts < 1 or concurrency < 1:
        _fail("--timeout, --trials, --rounds, --calls, --attempts and --concurrency must be positive")
    if time_limit is not None and time_limit <= 0:
        _fail("--time-limit must be positive")
    if cpu_lanes is not None and cpu_lanes < 1:
        _fail(f"--cpu-lanes must be at least 1, not {cpu_lanes}")
    if audit_lanes < 1:
        _fail(f"--audit-lanes must be at least 1, not {audit_lanes}")
    try:
        check_policy(policy)
        chosen = select(templates)
    except ValueError as e:
        _fail(f"--{e}" if str(e).startswith("policy") else str(e))
    try:
        devices = tuple(dict.fromkeys(_named(d) if report_only else str(check_device(d)) for d in _devices(device)))
        if len(devices) > 1 and "cpu" in devices:
            raise EvaluationError(f"--device {','.join(devices)}: the CPU judges alone (no GPU beside it)")
        whole = discover(tasks_dir)
        suite = select_levels(whole, level) if level else whole
    except (EvaluationError, SuiteError) as e:
        _fail(str(e))
    for rel, why in whole.skipped:
        err.print(f"[yellow]skipped[/] {escape(rel)}: {escape(why)}", highlight=False)

    journal = Journal(out / JOURNAL)
    if report_only and not journal.path.exists():
        _fail(f"--report-only: no journal at {journal.path}")
    if redo:
        if not resume or report_only:
            _fail("--redo needs --resume (and judges, so not with --report-only)")
        unknown = sorted(set(redo) - {st.name for st in whole.tasks})
        if unknown:
            _fail(f"--redo {unknown[0]}: no such task in {tasks_dir}")
        for r in journal.drop(set(redo)):
            if r.get("case"):
                shutil.rmtree(out / r["case"], ignore_errors=True)
    if reaudit and (not resume or report_only):
        _fail("--reaudit needs --resume (and audits, so not with --report-only)")
    if report_only:
        _check_journal_matches(journal, policy, devices[0].split(":")[0])
    if not resume and not report_only:
        journal.reset()
        shutil.rmtree(out / "cases", ignore_errors=True)
    hacker = None
    if model:  # the openai SDK is imported only here
        from kernelrl.redteam.hacker import Hacker, HackerConfig
        from kernelrl.search.llm import Budget, LLMClient, LLMConfig, LLMError

        spent = sum(r.get("cost_usd", 0.0) for r in journal.load().values() if r["kind"] == "attempt")
        try:
            llm = LLMClient(LLMConfig(model=model, base_url=base_url, api_key_env=api_key_env, max_tokens=max_tokens,
                                      concurrency=concurrency, price_in_per_mtok=price_in,
                                      price_out_per_mtok=price_out), Budget(budget, spent_usd=spent))
        except LLMError as e:
            _fail(str(e))
        hacker = Hacker(llm, HackerConfig(attempts=attempts, concurrency=concurrency))
        if budget is not None and not (price_in or price_out):
            err.print("[yellow]warning:[/] --budget without --price-in/--price-out: every call costs $0, so the budget "
                      "never stops the run", highlight=False)
    eval_cfg = EvalConfig(device=devices[0], policy=policy, timeout_s=timeout, build_timeout_s=min(timeout, 240.0),
                          correctness_trials=trials, timing_rounds=rounds, max_timing_rounds=rounds,
                          timing_precision=0.0, calls_per_round=calls)
    config = RunConfig(eval=eval_cfg, templates=chosen, devices=devices, cpu_lanes=cpu_lanes, audit_lanes=audit_lanes,
                       deadline=time.monotonic() + time_limit if time_limit else None)
    team = RedTeam(config, out, journal, hacker, reaudit=reaudit)
    try:
        finished = report_only or _run(team, suite.tasks, resume)  # a report-only run: its journal's, below
    finally:
        if hacker is not None:
            hacker.llm.close()
    if hacker is not None and hacker.error is not None:
        _fail(str(hacker.error))
    note = f"The LLM hacker stopped: {hacker.stopped}." if hacker is not None and hacker.stopped else ""
    summary = summarise(team, suite.tasks, suite=str(tasks_dir), note=note)
    if report_only:
        finished = not summary["unfinished"]
    paths = write(summary, out)
    _print(summary, err if json_out else Console(soft_wrap=True))
    if not finished:
        err.print(f"[yellow]stopped early[/] (the time limit, or the LLM budget): {len(summary['unfinished'])} tasks "
                  "unfinished; run again with --resume to go on", highlight=False)
    err.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
    raise typer.Exit(1 if has_holes(summary) else 0)


def _named(device: str) -> str:
    """A device as a run on it names it, unchecked (`--report-only` reads a journal a GPU machine wrote)."""
    import torch

    d = torch.device(device)
    return f"{d.type}:{d.index or 0}" if d.type == "cuda" else d.type


def _run(team, tasks, resume: bool) -> bool:
    """The run, with a progress bar of template verdicts on stderr."""
    from kernelrl.evaluate import EvaluationError
    from kernelrl.redteam.journal import key

    done = team.journal.load() if resume else {}
    total = len(tasks) * len(team.config.templates)
    ahead = sum(key(team.base(st, "template", t.name)) in done for st in tasks for t in team.config.templates)
    with Progress(TextColumn("[bold]redteam[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=False) as progress:
        bar = progress.add_task("", total=total, completed=ahead)

        def seen(r: dict):
            what = f"{r['task']}: {r['kind']} {r['name']} {r.get('status', '')}".strip()
            progress.update(bar, advance=1 if r["kind"] == "template" else 0, description=escape(what))

        team.on_record = seen
        try:
            return team.run(tasks)
        except EvaluationError as e:
            _fail(str(e))


def _print(summary: dict, console: Console) -> None:
    """Tasks with a finding or a hole, and the counts, as a rich table."""
    t = Table(title=f"red team ({summary['policy']} policy, {summary['device']})", title_justify="left")
    for col in ("task", "audit", "holes"):
        t.add_column(col)
    for name, r in summary["tasks"].items():
        if r["audit"] or r["holes"]:
            audit = ", ".join(f"{f['check']}" + (" (note)" if f["severity"] == "note" else "") for f in r["audit"])
            holes = ", ".join(h["template"] + (f" {h['speedup']:.2f}×" if isinstance(h["speedup"], float) else "")
                              + (" (allowed)" if h["allowed_by_policy"] else "") for h in r["holes"])
            t.add_row(escape(name), escape(audit or "-"), escape(holes or "-"))
    console.print(t)
    c = summary["counts"]
    console.print(f"{c['tasks']} tasks, {c['judged']} verdicts, {c['holes']} holes ({c['allowed_by_policy']} allowed "
                  f"by the policy), {c['flagged']} tasks flagged"
                  + (f", {c['stale_audits']} audited by an older audit (--resume --reaudit)"
                     if c["stale_audits"] else ""),
                  highlight=False)


def _devices(values: list[str]) -> list[str]:
    """The devices named (repeated or comma-separated), else every CUDA device, else the CPU."""
    named = [d.strip() for v in values for d in v.split(",") if d.strip()]
    if named:
        return named
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else ["cpu"]


def _check_journal_matches(journal: Journal, policy: str, device_type: str) -> None:
    """A report of a journal judged under another policy or device type would find none of its records: say so."""
    runs = {(r["policy"], r["device_type"]) for r in journal.load().values()}
    if runs and (policy, device_type) not in runs:
        held = ", ".join(f"--policy {p} --device {d}" for p, d in sorted(runs))
        _fail(f"--report-only: {journal.path} holds no records under --policy {policy} on {device_type}; it holds {held}")


def _fail(message: str, code: int = 2):
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # messages may hold [brackets]
    raise typer.Exit(code)
