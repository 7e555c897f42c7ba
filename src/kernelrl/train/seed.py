"""Seeding the store with honest, evaluated programs so stage 1 has something to learn from."""
from __future__ import annotations

from pathlib import Path

from kernelrl.search.proposers import resolve
from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.config import TasksConfig
from kernelrl.train.reward import Judged, RewardPool, Rollout


def seed_programs(task: Task, seeds_dir: str | Path) -> list[str]:
    """Sources in SEEDS/<task>.py and SEEDS/<task>/*.py (any sub-folders searched), sorted by path."""
    root = Path(seeds_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such seeds directory (tasks.seeds_dir); point it at a folder of "
                                "candidates named after their tasks, or leave it empty")
    found = sorted(set(root.rglob(f"{task.name}.py")) | set(root.rglob(f"{task.name}/*.py")))
    return [p.read_text() for p in found]


def seed_store(store: Store, tasks: list[Task], pool: RewardPool, settings: TasksConfig,
               device: str) -> list[Judged]:
    """Evaluate every task's seed programs and non-LLM proposals (each once, however often the run restarts)."""
    rollouts, proposers = [], []
    for task in tasks:
        store.add_task(task)
        for proposer in resolve(settings.seed_proposers):
            if proposer.applies(task, device):
                rollouts.append(Rollout(task=task, reply="", source=proposer.propose(task)))
                proposers.append(proposer.name)
        if settings.seeds_dir:
            for src in seed_programs(task, settings.seeds_dir):
                rollouts.append(Rollout(task=task, reply="", source=src))
                proposers.append("seed")
    futures = [pool.submit(r, p, unique=True) for r, p in zip(rollouts, proposers)]
    return [f.result() for f in futures]
