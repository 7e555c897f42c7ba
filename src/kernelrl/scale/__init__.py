"""Judging many candidates: a scheduler hands (task, candidate, policy) jobs to evaluators and returns Verdicts.

Two backends sit behind one interface, and callers (bench, optimize, train, serve) do not know which runs:
- `LocalScheduler` (`kernelrl.scale.local`): this machine's devices, nothing to install; the CPU stage (checks,
  builds, worker start-up) runs ahead of each device's GPU stage (correctness and timing, back to back).
- `RayScheduler` (`kernelrl.scale.ray_backend`, extra `kernelrl[ray]`): one evaluator actor per GPU of a Ray
  cluster, builds as CPU tasks, jobs retried elsewhere when a worker, actor or node dies.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Protocol

from kernelrl.task import Candidate, Task
from kernelrl.verdict import Verdict


@dataclass(frozen=True)
class SchedulerStats:
    """Progress of a scheduler since it started: what a console line and `/metrics` show."""

    queued: int = 0                      # submitted, not yet on a device
    running: int = 0                     # on a device now (or in its CPU stage)
    done: int = 0                        # verdicts returned
    retried: int = 0                     # jobs re-run after a worker, actor or node died under them
    elapsed_s: float = 0.0               # since the scheduler started
    verdicts_per_minute: float = 0.0     # over the last few minutes
    device_busy: dict[str, float] = field(default_factory=dict)  # device -> fraction of wall time in GPU stage

    def to_dict(self) -> dict:
        return asdict(self)


class Scheduler(Protocol):
    """Judges jobs on some set of devices; each job's Verdict arrives exactly once, through its Future."""

    def submit(self, task: Task, candidate: Candidate, policy: str | None = None) -> "Future[Verdict]":
        """Queue one evaluation; `policy` overrides the evaluator's precision policy for this job."""
        ...

    def stats(self) -> SchedulerStats:
        ...

    def close(self) -> None:
        """Finish nothing more: stop workers and evaluators (jobs still queued get cancelled Futures)."""
        ...


class ScheduledEvaluator:
    """An Evaluator's `evaluate` answered by a scheduler: each call submits one job and waits for its Verdict."""

    def __init__(self, scheduler: Scheduler, policy: str | None = None):
        self.scheduler, self.policy = scheduler, policy

    def evaluate(self, task: Task, candidate: Candidate) -> Verdict:
        return self.scheduler.submit(task, candidate, self.policy).result()


RAY_HELP = ('judge on a Ray cluster, one evaluator per GPU: "auto" (the cluster this machine is in, else a new '
            'local one) or the head\'s address (host:6379, ray://host:10001); needs pip install "kernelrl[ray]"')


def check_group(group: int, ray: str | None = None) -> None:
    """Refuse a group (candidates of one task judged together) below 1, or above 1 on Ray, whose GPU actors judge
    one job at a time: ValueError, its message fit to follow "--" in a command's error."""
    if group < 1 or (group > 1 and ray is not None):
        raise ValueError(f"group must be at least 1, and 1 with --ray (each GPU's actor judges alone), not {group}")


def make_scheduler(config, devices=("cpu",), ray: str | None = None, group: int = 1, **kw) -> Scheduler:
    """A LocalScheduler on this machine's `devices`, judging up to `group` waiting jobs of one task together; with
    `ray` ("auto" or a cluster address) a RayScheduler on the cluster's GPUs (RayUnavailable, naming
    `pip install "kernelrl[ray]"`, where Ray is not installed)."""
    check_group(group, ray)
    if ray is None:
        from kernelrl.scale.local import LocalScheduler

        return LocalScheduler(config, devices, group=group, **kw)
    from kernelrl.scale.ray_backend import RayScheduler  # imports ray only when it is asked for

    return RayScheduler(config, address=ray, **kw)
