"""`kernelrl train`: run CUDA-L1's three stages from a TOML file, or the smoke preset."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from kernelrl.scale import RAY_HELP
from kernelrl.task import POLICY_HELP
from kernelrl.train.config import ConfigError, TrainConfig, smoke_config


def train_command(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML training config (see configs/)."),
    smoke: bool = typer.Option(False, "--smoke", help="Tiny random model, tiny tasks, every stage briefly."),
    device: str = typer.Option("cpu", "--device", help="Evaluator device for --smoke: cpu, cuda or cuda:N."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (overrides the config's `out`)."),
    service: Optional[str] = typer.Option(None, "--service", help="Judge on a `kernelrl serve` at this URL "
                                          "instead of local evaluators (token from $KERNELRL_API_TOKEN)."),
    policy: Optional[str] = typer.Option(None, "--policy", help="the reward's " + POLICY_HELP + " (default: the "
                                         "config's evaluator.eval policy, else strict)."),
    ray: Optional[str] = typer.Option(None, "--ray", help=RAY_HELP + " (instead of evaluator.devices)."),
) -> None:
    """Train a kernel-writing policy: SFT, self-training, then contrastive RL with the evaluator as reward."""
    if (config is None) == (not smoke):
        raise typer.BadParameter("give either --config FILE or --smoke (not both, not neither)")
    try:
        if smoke:
            cfg = smoke_config(out or Path("runs/train-smoke"), device=device)
        else:
            cfg = TrainConfig.from_toml(config)
            if out is not None:
                cfg = cfg.with_(out=str(out))
        if service:
            cfg = cfg.with_(evaluator=replace(cfg.evaluator, service=service))
        if ray:
            cfg = cfg.with_(evaluator=replace(cfg.evaluator, ray=ray))
        if policy is not None:
            cfg = cfg.with_(evaluator=replace(cfg.evaluator, eval=dict(cfg.evaluator.eval, policy=policy)))
    except ConfigError as e:
        typer.secho(f"error: {e}", fg="red", err=True)
        raise typer.Exit(2)
    missing = missing_train_module()
    if missing:
        _fail_missing(missing)
    from kernelrl.train.pipeline import run

    try:
        summary = run(cfg, say=lambda s: typer.echo(s, err=True))
    except Exception as e:  # noqa: BLE001 - a CLI prints what went wrong and what to do, not a traceback
        if isinstance(e, ImportError) and _missing_name(e) in TRAIN_MODULES:
            _fail_missing(_missing_name(e))
        if isinstance(e, _user_errors()):
            typer.secho(f"error: {e}", fg="red", err=True)
            raise typer.Exit(2)
        raise
    typer.echo(json.dumps(summary.to_dict(), indent=2))


TRAIN_MODULES = ("trl", "peft", "transformers", "datasets", "accelerate")  # what the `train` extra installs


def missing_train_module() -> str | None:
    """The first module the `train` extra's packages need that cannot be imported here, or None when all can."""
    import importlib

    for name in TRAIN_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:
            return _missing_name(e) or name
    return None


def _missing_name(error: BaseException) -> str | None:
    """The top-level module whose absence caused an ImportError (transformers re-raises it without a name)."""
    names = []
    while error is not None:
        if isinstance(error, ImportError) and error.name:
            names.append(error.name.split(".")[0])
        error = error.__cause__ or error.__context__
    return names[-1] if names else None


def _fail_missing(module: str) -> None:
    typer.secho(f"error: kernelrl train needs the `train` extra ({module} cannot be imported): "
                f"pip install \"kernelrl[train]\"", fg="red", err=True)
    raise typer.Exit(2)


def _user_errors() -> tuple[type[Exception], ...]:
    """Errors that come from the user's input or machine, each with a message saying what to do."""
    from kernelrl.client import ServiceError
    from kernelrl.evaluate.evaluator import EvaluationError
    from kernelrl.scale.ray_backend import RayUnavailable
    from kernelrl.search.store import StoreError
    from kernelrl.task import TaskError
    from kernelrl.train.checkpoints import StateError
    from kernelrl.train.model import ModelError
    from kernelrl.train.sft import StageError

    return (ConfigError, EvaluationError, FileNotFoundError, ModelError, RayUnavailable, ServiceError, StageError,
            StateError, StoreError, TaskError)


app = typer.Typer(add_completion=False)
app.command("train")(train_command)

if __name__ == "__main__":
    app()
