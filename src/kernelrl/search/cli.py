"""`kernelrl optimize TASK`: the contrastive optimisation loop from the command line.

Settings come from typed defaults, then an optional TOML file (`--config`, sections [llm], [loop], [eval]),
then flags. Secrets come only from the environment (the variable named by --api-key-env).
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kernelrl.search.llm import Budget, LLMClient, LLMConfig, LLMError
from kernelrl.search.loop import Loop, LoopConfig, LoopError, Snapshot
from kernelrl.search.report import write_report
from kernelrl.scale import RAY_HELP
from kernelrl.scale.ray_backend import RayUnavailable  # imports Ray only when a RayScheduler is made
from kernelrl.search.store import Store, StoreError
from kernelrl.task import POLICY_HELP, Task, TaskError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STORE_NAME = "store.sqlite"


def optimize_command(
    task: Path = typer.Argument(..., help="Reference program (KernelBench format: Model, get_inputs, "
                                          "get_init_inputs)."),
    device: Optional[List[str]] = typer.Option(None, "--device", "-d", help="cpu, cuda, cuda:N or cuda:all; "
                                               "repeat for one evaluation worker per device (default: cuda if "
                                               "available, else cpu)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="LLM name; without it only the non-LLM "
                                                                    "proposers run."),
    iterations: Optional[int] = typer.Option(None, "--iterations", "-n", help="LLM proposals in total (default: 10)."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Stop starting LLM calls once this much USD is "
                                                                  "spent (needs --price-in/--price-out)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory (store, report, best.py) "
                                                                 "(default: runs/TASK). Re-running resumes it."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint "
                                                                    "(default: $OPENAI_BASE_URL)."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Environment variable holding the API "
                                                                          "key (default: OPENAI_API_KEY)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="LLM calls in flight at once (default: 4)."),
    lookahead: Optional[int] = typer.Option(None, "--lookahead", help="Build a prompt only while at most this many "
                                            "proposals are unjudged, so it shows the verdicts of the others "
                                            "(default: --concurrency, or the number of devices if larger; 0: one "
                                            "proposal at a time)."),
    prepare_ahead: Optional[int] = typer.Option(None, "--prepare-ahead", help="Candidates started and built "
                                                "ahead of each device while it judges another, so builds never "
                                                "keep a GPU waiting (default: 3 on CUDA, 0 on the CPU, whose "
                                                "cores the timing uses)."),
    proposers: Optional[str] = typer.Option(None, "--proposers", help="Comma-separated seed proposers "
                                                                      "(default: all that apply); 'none' for none."),
    exemplars: Optional[int] = typer.Option(None, "--exemplars", help="Earlier variants per prompt (default: 2)."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="Exemplar choice: bucket, best, random, "
                                                                    "diverse (default: bucket)."),
    target: Optional[str] = typer.Option(None, "--target", help="What the LLM writes: any, cuda, triton, "
                                                                "pytorch (default: any)."),
    price_in: Optional[float] = typer.Option(None, "--price-in", help="USD per million input tokens (default: 0)."),
    price_out: Optional[float] = typer.Option(None, "--price-out", help="USD per million output tokens (default: 0)."),
    temperature: Optional[float] = typer.Option(None, "--temperature"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Reply token limit (max_tokens)."),
    max_completion_tokens: Optional[int] = typer.Option(None, "--max-completion-tokens",
                                                        help="Reply token limit for reasoning models."),
    reasoning_effort: Optional[str] = typer.Option(None, "--reasoning-effort", help="low, medium or high."),
    stream: Optional[bool] = typer.Option(None, "--stream/--no-stream", help="Stream replies (default: no)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per LLM attempt (default: 600)."),
    target_speedup: Optional[float] = typer.Option(None, "--target-speedup", help="Stop at this verified speedup."),
    patience: Optional[int] = typer.Option(None, "--patience", help="Stop after N LLM proposals without a new best."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds after which no LLM call starts."),
    seed: Optional[int] = typer.Option(None, "--seed"),
    review_speedup: Optional[float] = typer.Option(
        None, "--review-speedup", help="Ask the LLM for a second opinion on correct candidates at least this fast "
                                       "(or with hack warnings); recorded in the store, never changes a verdict."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML file with llm, loop and eval sections."),
    policy: Optional[str] = typer.Option(None, "--policy", help=POLICY_HELP + " (default: the config's [eval] "
                                                                "policy, else strict)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live display; log lines only."),
    ray: Optional[str] = typer.Option(None, "--ray", help=RAY_HELP + " (--device is then ignored)."),
):
    """Make TASK faster: seed with non-LLM rewrites, then ask an LLM for faster variants, showing it earlier
    variants with their measured speedups; every candidate is judged by the evaluator."""
    console = Console(stderr=True, soft_wrap=True)  # long paths and errors stay on one line
    try:
        code = _optimize(console, task, device, model, iterations, budget, out, base_url, api_key_env, concurrency,
                         proposers, exemplars, strategy, target, price_in, price_out, temperature, max_tokens,
                         max_completion_tokens, reasoning_effort, stream, timeout, target_speedup, patience,
                         time_limit, seed, config, quiet, review_speedup, lookahead, policy=policy, ray=ray,
                         prepare_ahead=prepare_ahead)
    except (TaskError, StoreError, LLMError, LoopError, ValueError, RayUnavailable) as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1)
    raise typer.Exit(code)


def _optimize(console, task_path, devices, model, iterations, budget, out, base_url, api_key_env, concurrency,
              proposers, exemplars, strategy, target, price_in, price_out, temperature, max_tokens,
              max_completion_tokens, reasoning_effort, stream, timeout, target_speedup, patience, time_limit, seed,
              config_path, quiet, review_speedup=None, lookahead=None, policy=None, ray=None,
              prepare_ahead=None) -> int:
    from kernelrl.evaluate import EvalConfig, Evaluator
    from kernelrl.scale import ScheduledEvaluator, make_scheduler

    file_cfg = _read_config(config_path)
    task = Task.from_file(task_path)
    devices = _expand_devices(devices) if ray is None else ["cpu"]  # with Ray, the cluster's devices judge
    out = out or Path("runs") / task.name

    llm_d = dict(file_cfg.get("llm", {}))
    _put(llm_d, model=model, base_url=base_url, api_key_env=api_key_env, concurrency=concurrency,
         price_in_per_mtok=price_in, price_out_per_mtok=price_out, temperature=temperature, max_tokens=max_tokens,
         max_completion_tokens=max_completion_tokens, reasoning_effort=reasoning_effort, stream=stream,
         timeout_s=timeout)
    budget_usd = budget if budget is not None else llm_d.pop("budget_usd", None)
    llm_d.pop("budget_usd", None)

    loop_d = dict(file_cfg.get("loop", {}))
    prompt_d = dict(loop_d.pop("prompt", {}))
    _put(prompt_d, target=target)
    _put(loop_d, iterations=iterations, exemplars=exemplars, exemplar_strategy=strategy,
         target_speedup=target_speedup, patience=patience, time_limit_s=time_limit, seed=seed,
         review_speedup=review_speedup, lookahead=lookahead)
    if proposers is not None:
        loop_d["proposers"] = () if proposers.strip() == "none" else tuple(
            p.strip() for p in proposers.split(",") if p.strip())
    loop_d.setdefault("iterations", 10)
    if not llm_d.get("model"):
        loop_d["iterations"] = 0
    loop_cfg = LoopConfig.from_dict(dict(loop_d, prompt=prompt_d))
    eval_d = dict(file_cfg.get("eval", {}))
    _put(eval_d, policy=policy)
    eval_cfgs = [EvalConfig.from_dict(dict(eval_d, device=d)) for d in devices]
    run_info = {"policy": eval_cfgs[0].policy_for(task.meta)}

    if budget_usd is not None and not (llm_d.get("price_in_per_mtok") or llm_d.get("price_out_per_mtok")):
        console.print("[yellow]warning:[/yellow] --budget without --price-in/--price-out: every call costs $0, "
                      "so the budget never stops the run")
    store = Store(Path(out) / STORE_NAME)
    with contextlib.ExitStack() as stack:
        stack.callback(store.close)
        llm = None
        if llm_d.get("model"):
            llm = LLMClient(LLMConfig.from_dict(llm_d), Budget(budget_usd, spent_usd=store.spent_usd()))
            stack.callback(llm.close)
        ahead = prepare_ahead if prepare_ahead is not None else (
            3 if any(d.startswith("cuda") for d in devices) else 0)
        if ahead < 0:
            raise ValueError(f"--prepare-ahead must be 0 or more, not {ahead}")
        if ray is None and ahead == 0:
            evaluators = {cfg.device: stack.enter_context(Evaluator(cfg)) for cfg in eval_cfgs}
        elif ray is None:  # lanes: each device judges one job while `ahead` more are prepared for it
            scheduler = stack.enter_context(make_scheduler(eval_cfgs[0], devices=tuple(devices), lookahead=ahead))
            evaluators = {f"{devices[i % len(devices)]}#{i}": ScheduledEvaluator(scheduler)
                          for i in range(scheduler.capacity)}
        else:  # one loop worker per job the cluster holds at once, all submitting to its scheduler
            scheduler = stack.enter_context(make_scheduler(eval_cfgs[0], ray=ray))
            evaluators = {f"{scheduler.device_kind}@ray#{i}": ScheduledEvaluator(scheduler)
                          for i in range(scheduler.capacity)}
            devices = [f"Ray cluster {ray} ({scheduler.capacity} jobs at once)"]
        live = not quiet and console.is_terminal
        loop = Loop(task, store, evaluators, llm=llm, config=loop_cfg,
                    on_event=None if live else (lambda line: console.print(line, markup=False, highlight=False)))
        console.print(f"optimizing [bold]{task.name}[/bold] on {', '.join(devices)}"
                      f"{' with ' + llm_d['model'] if llm else ' (non-LLM proposers only; pass --model to add an LLM)'}"
                      f"; run directory {out}")
        try:
            if live:
                with Live(get_renderable=lambda: _render(loop.snapshot()), console=console, refresh_per_second=4):
                    result = loop.run()
            else:
                result = loop.run()
        except LoopError:
            write_report(store, task, out, run={"stop_reason": "error", **run_info})
            raise
        report = write_report(store, task, out, run={"stop_reason": result.stop_reason, "seconds": result.seconds,
                                                     **run_info})
    best = result.best
    console.print(f"stopped: {result.stop_reason}; "
                  + (f"best verified speedup [bold green]{best.speedup:.3f}x[/bold green] "
                     f"(candidate {best.id}, {best.proposer}) -> {Path(out) / 'best.py'}" if best
                     else "no candidate passed the evaluator"))
    console.print(f"report: {report}")
    return 130 if result.stop_reason == "interrupted" else 0


def _render(s: Snapshot):
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("best", f"{s.best_speedup:.3f}×" if s.best_speedup is not None else "—")
    statuses = " · ".join(f"{k} {v}" for k, v in sorted(s.by_status.items())) or "—"
    t.add_row("verdicts", f"{statuses}   (judging {s.evaluating})")
    if s.llm_target:
        t.add_row("LLM", f"{s.llm_done}/{s.llm_target} proposals, {s.llm_in_flight} in flight, {s.retries} retries")
        cost = f"${s.cost_usd:.4f}" + (f" of ${s.budget_usd:.2f}" if s.budget_usd is not None else "")
        t.add_row("tokens", f"{s.tokens_in:,} in / {s.tokens_out:,} out   cost {cost}")
    t.add_row("elapsed", f"{s.elapsed_s:.0f}s" + (f"   stopping: {s.stop_reason}" if s.stop_reason else ""))
    return Group(t, Text("\n".join(s.log), style="dim"))


def _read_config(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        d = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None
    unknown = set(d) - {"llm", "loop", "eval"}
    if unknown:
        raise ValueError(f"{path}: unknown sections {sorted(unknown)}; use [llm], [loop] and [eval]")
    return d


def _expand_devices(devices: list[str] | None) -> list[str]:
    if not devices:
        import torch
        devices = ["cuda" if torch.cuda.is_available() else "cpu"]
    out: list[str] = []
    for d in devices:
        if d == "cuda:all":
            import torch
            n = torch.cuda.device_count()
            if n == 0:
                raise ValueError("--device cuda:all: no CUDA device is visible")
            out += [f"cuda:{i}" for i in range(n)]
        else:
            out.append(d)
    kinds = {d.split(":")[0] for d in out}
    if len(kinds) > 1:
        raise ValueError(f"--device {' '.join(out)}: mixes device kinds; speedups from different kinds of device "
                         "are not comparable, so run them separately")
    if len(set(out)) != len(out):
        raise ValueError(f"--device {' '.join(out)}: a device is listed twice")
    return out


def _put(d: dict, **values) -> None:
    """Flags override the config file: copy the values that were given."""
    d.update({k: v for k, v in values.items() if v is not None})


if __name__ == "__main__":
    typer.run(optimize_command)
