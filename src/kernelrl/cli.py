"""The `kernelrl` command: thin wrappers that parse arguments and call the packages."""
from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelrl.task import POLICY_HELP

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Make GPU code faster with LLMs and RL, and prove every speedup.")
err = Console(stderr=True, soft_wrap=True)  # an error stays on one line, whatever the width
out = Console()


def fail(message: str, code: int = 2):
    """Print a one-line error a user can act on, and exit non-zero."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # messages may hold [brackets]
    raise typer.Exit(code)


@app.command("eval")
def eval_command(
    reference: Path = typer.Argument(..., help="reference file: class Model, get_inputs(), get_init_inputs()"),
    candidate: Path = typer.Argument(..., help="candidate file: class ModelNew"),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N"),
    json_out: bool = typer.Option(False, "--json", help="print the Verdict as one JSON object"),
    timeout: float = typer.Option(300.0, help="seconds for the whole evaluation, build included"),
    compile_baseline: bool = typer.Option(False, "--compile", help="also time torch.compile(reference)"),
    trials: int = typer.Option(5, help="correctness trials (fresh secret seeds each)"),
    rounds: int = typer.Option(5, help="timing rounds (reference and candidate alternate)"),
    calls: int = typer.Option(20, help="timed calls per program per round"),
    max_rounds: int = typer.Option(15, help="more rounds, up to this many, until the speedup is --precision sure"),
    precision: float = typer.Option(0.004, help="target relative standard error of the speedup (0: fixed rounds)"),
    basis: str = typer.Option("device", help="CUDA: compare device time (graph replay, where both programs "
                                             "capture) or per-call 'latency'"),
    policy: str = typer.Option("strict", help=POLICY_HELP),
):
    """Is CANDIDATE correct, and how much faster than REFERENCE is it, really?"""
    from kernelrl.evaluate import EvalConfig, EvaluationError, Evaluator
    from kernelrl.task import Candidate, Task, TaskError, check_policy

    try:
        task = Task.from_file(reference)
        cand = Candidate.from_file(candidate)
    except TaskError as e:
        fail(str(e))
    if timeout <= 0 or trials < 1 or rounds < 1 or calls < 1 or max_rounds < 1 or precision < 0:
        fail("--timeout, --trials, --rounds, --calls and --max-rounds must be positive, --precision not negative")
    if basis not in ("device", "latency"):
        fail(f"--basis must be 'device' or 'latency', not {basis!r}")
    try:
        check_policy(policy)
    except ValueError as e:
        fail(f"--{e}")
    config = EvalConfig(device=device, timeout_s=timeout, build_timeout_s=min(timeout, 240.0),
                        compare_compile=compile_baseline, correctness_trials=trials, timing_rounds=rounds,
                        calls_per_round=calls, max_timing_rounds=max_rounds, timing_precision=precision,
                        timing_basis=basis, policy=policy)
    try:
        with Evaluator(config) as ev:
            verdict = ev.evaluate(task, cand)
    except EvaluationError as e:
        fail(str(e))
    if json_out:
        sys.stdout.write(verdict.to_json() + "\n")
    else:
        print_verdict(verdict)
    raise typer.Exit(0 if verdict.ok else 1)


_BASIS = {"cuda_graph": "device time (both replayed from CUDA graphs)",
          "cuda_events": "per-call latency (CUDA events around eager calls)",
          "perf_counter": "per-call latency (host clock)"}


def print_verdict(v) -> None:
    """A readable table of one Verdict."""
    colour = {"ok": "green", "incorrect": "red", "rejected": "magenta"}.get(v.status, "yellow")
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_row("status", f"[bold {colour}]{v.status}[/]")
    t.add_row("task", f"{v.task} on {v.device}, {v.policy} precision policy")
    if v.speedup is not None:
        err = f" (± {100 * v.speedup_stderr:.1f}% standard error)" if v.speedup_stderr is not None and \
            v.speedup_stderr < 1 else ""
        t.add_row("speedup", f"[bold]{v.speedup:.3f}×[/] over the eager reference, {_BASIS.get(v.speedup_method, '')}"
                             f"{err}")
    if v.compile_speedup is not None:
        t.add_row("", f"{v.compile_speedup:.3f}× over torch.compile(reference), same method")
    if v.latency_speedup is not None and v.speedup_method == "cuda_graph":
        t.add_row("", f"{v.latency_speedup:.3f}× in per-call latency (eager calls, launch work included)")
    for label, timing in (("reference", v.reference), ("candidate", v.candidate_timing),
                          ("torch.compile", v.reference_compiled), ("reference graph", v.reference_graph),
                          ("candidate graph", v.candidate_graph), ("torch.compile graph", v.reference_compiled_graph)):
        if timing:
            wall = f", per call {timing.wall_median_us:.1f} µs" if timing.wall_median_us else ""
            t.add_row(label, f"{timing.median_us:.1f} µs median (±{timing.stdev_us:.1f}, n={timing.n}, "
                             f"{timing.method}{wall})")
    if v.error:
        t.add_row("error", f"max abs {v.error.max_abs:.3g}, rel L2 {v.error.rel_l2:.3g} "
                           f"(atol {v.error.atol:g}, rtol {v.error.rtol:g}, {v.error.trials} trials)")
    if v.message:
        t.add_row("message", v.message)
    for f in v.flags:
        t.add_row(f"flag ({f.severity})", f"[{f.check}] {f.hack + ': ' if f.hack else ''}{f.message}")
    conf = v.confinement
    if conf:
        on = [k for k in ("landlock", "netns", "env_scrubbed", "seccomp") if conf.get(k) is True]
        t.add_row("confinement", ", ".join(on) or "none")
    t.add_row("seconds", f"{v.seconds:.1f}")
    out.print(t)


def _mount(name: str, module: str, attr: str, help_text: str, extra: str = ""):
    """Attach a package's typer callable or sub-app; a missing optional dependency becomes a clear error."""
    try:
        mod = __import__(module, fromlist=[attr])
        obj = getattr(mod, attr)
    except ImportError as e:
        missing = e.name or str(e)

        def unavailable(args: list[str] = typer.Argument(None, hidden=True)):
            hint = f"pip install 'kernelrl[{extra}]'" if extra else "reinstall kernelrl"
            fail(f"`kernelrl {name}` needs the Python module {missing!r}, which is not installed: {hint}")

        app.command(name, help=f"{help_text} (unavailable here: needs {missing})",
                    context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(unavailable)
        return
    if isinstance(obj, typer.Typer):
        app.add_typer(obj, name=name, help=help_text)
    else:
        app.command(name, help=help_text)(obj)


_mount("bench", "kernelrl.bench.cli", "bench_command", "Run a KernelBench-format suite and print fast_p tables.")
_mount("optimize", "kernelrl.search.cli", "optimize_command",
       "Contrastive optimisation loop: LLM and non-LLM proposers, the evaluator as judge.")
_mount("train", "kernelrl.train.cli", "train_command", "CUDA-L1's three training stages on TRL.", extra="train")
_mount("gemm", "kernelrl.gemm.cli", "app", "Per-shape HGEMM search on Hopper, and the tuned matmul.")
_mount("redteam", "kernelrl.redteam.cli", "redteam_command",
       "Find the holes in a task set before a policy does: every known hack and a task audit, judged by the evaluator.")
_mount("audit", "kernelrl.evaluate.audit_cli", "audit_command", "Static findings for a candidate and what each means.")
_mount("serve", "kernelrl.serve.cli", "serve_command",
       "The reward as an HTTP service with a durable job queue (runs untrusted code: loopback unless a token is set).",
       extra="serve")


def main():  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
