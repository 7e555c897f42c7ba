"""Regression cases: every hole the red team found, as a folder a test can load and judge again.

A case folder holds `reference.py` (the task), `candidate.py` (what came back ok), `verdict.json` (the verdict it
got) and `case.json` (the task's name and metadata, the policy, where the candidate came from)."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelrl.task import Candidate, Task, TaskMeta
from kernelrl.verdict import Verdict

CASES = "cases"


@dataclass(frozen=True)
class Case:
    """One hole: the task, the candidate, the verdict it got, the policy and its origin (a template, or llm-N)."""

    task: Task
    candidate: Candidate
    verdict: Verdict
    policy: str
    origin: str
    path: Path


def case_dir(root: Path, task: Task, origin: str, policy: str) -> Path:
    """The folder of one case: `<task>--<origin>--<policy>` under `root`, in characters safe for any filesystem."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{task.name}--{origin}--{policy}")
    return Path(root) / safe


def write_case(root: Path, task: Task, candidate: Candidate, verdict: Verdict, origin: str, policy: str) -> Path:
    """Write one case under `root`; returns its folder."""
    folder = case_dir(root, task, origin, policy)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reference.py").write_text(task.source)
    (folder / "candidate.py").write_text(candidate.source)
    (folder / "verdict.json").write_text(verdict.to_json(indent=1) + "\n")
    (folder / "case.json").write_text(json.dumps({"task": task.name, "task_meta": asdict(task.meta), "policy": policy,
                                                  "origin": origin, "status": verdict.status,
                                                  "speedup": verdict.speedup, "device": verdict.device}, indent=1)
                                      + "\n")
    return folder


def load_case(folder: Path) -> Case:
    """The case in `folder` (as `write_case` wrote it)."""
    folder = Path(folder)
    info = json.loads((folder / "case.json").read_text())
    task = Task.from_source((folder / "reference.py").read_text(), name=info["task"],
                            meta=TaskMeta.from_dict(info.get("task_meta", {})))
    return Case(task=task, candidate=Candidate.from_source((folder / "candidate.py").read_text(), name=info["origin"]),
                verdict=Verdict.from_json((folder / "verdict.json").read_text()), policy=info["policy"],
                origin=info["origin"], path=folder)


def load_cases(root: Path) -> list[Case]:
    """Every case under `root`, in name order."""
    return [load_case(p.parent) for p in sorted(Path(root).glob("*/case.json"))]
