"""Suites: any directory of KernelBench-format reference files, each paired with its candidate (or none).

A task's level comes from the first folder on its relative path named like `level1`, `level_2` or `Level-3`
(normalised to `level1`...); otherwise from its first folder; top-level files have level "". A candidate is
found at the same relative path under the candidates directory, else by file name anywhere under it (the one
in the same level folder wins when several share a name), else by level and problem id as KernelBench's own
generation runs write them: `level1/12_anything.py` for the reference `level1/12_Matmul_....py`, or a flat
`level_1_problem_12_sample_0_kernel.py` (the lowest sample when there are several; with `samples="all"`, every
sample, each a SuiteTask of its own in sample order: a group of candidates sharing the task). Nothing here runs
task or candidate code.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from kernelrl.task import Task, TaskError

_LEVEL = re.compile(r"^level[\s_-]*(\d+)$", re.IGNORECASE)
_PROBLEM = re.compile(r"^(\d+)_")  # KernelBench names a problem's file "<id>_<Name>.py"
# KernelBench's generation runs: level_1_problem_12_sample_0_kernel.py (also level1_problem_12...).
_GENERATED = re.compile(r"^level[_-]?(\d+)[_-]problem[_-]?(\d+)(?:[_-]sample[_-]?(\d+))?", re.IGNORECASE)
_IGNORED_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints", "candidates"}
SAMPLES = ("lowest", "all")  # which of a task's generated samples are judged


class SuiteError(ValueError):
    """A suite or candidates directory that cannot be used, with what to do about it."""


@dataclass(frozen=True)
class SuiteTask:
    """One reference of a suite and the candidate file matched to it (None when there is none)."""

    task: Task
    rel_path: str  # relative to the suite directory, '/'-separated
    level: str
    candidate_path: str | None = None
    note: str = ""  # why no candidate was matched, where one could not be chosen
    sample: int | None = None  # the candidate's sample number, where every sample of the task is judged

    @property
    def name(self) -> str:
        return self.rel_path[:-3] if self.rel_path.endswith(".py") else self.rel_path

    @property
    def id(self) -> str:
        """The task's name, with '#<sample>' where every sample is judged: one per candidate of a run."""
        return self.name if self.sample is None else f"{self.name}#{self.sample}"


@dataclass(frozen=True)
class Suite:
    """The tasks found under a directory, and the files that were skipped with the reason for each."""

    root: str
    tasks: tuple[SuiteTask, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(sorted({t.level for t in self.tasks}, key=level_sort_key))


def level_of(rel_path: str) -> str:
    """The level a relative path belongs to: 'levelN' from a folder like level_N, else its first folder."""
    folders = Path(rel_path).parts[:-1]
    for part in folders:
        m = _LEVEL.match(part)
        if m:
            return f"level{int(m.group(1))}"
    return folders[0] if folders else ""


def select_levels(suite: Suite, levels: list[str]) -> Suite:
    """The part of `suite` in `levels` ("1", "level1" and "level_1" name the same level); SuiteError for a level
    with no tasks."""
    wanted = []
    for name in levels:
        m = _LEVEL.match(name.strip()) or re.match(r"^(\d+)$", name.strip())
        level = f"level{int(m.group(1))}" if m else name.strip()
        if level not in suite.levels:
            raise SuiteError(f"no tasks in level {name!r}; this suite has {', '.join(suite.levels) or 'none'}")
        wanted.append(level)
    return replace(suite, tasks=tuple(t for t in suite.tasks if t.level in wanted))


def level_sort_key(level: str) -> tuple:
    """Sort level1 < level2 < level10 < other names."""
    m = re.match(r"^level(\d+)$", level)
    return (0, int(m.group(1)), "") if m else (1, 0, level)


def discover(tasks_dir: str | Path, candidates_dir: str | Path | None = None, samples: str = "lowest") -> Suite:
    """Every reference .py file under `tasks_dir` (recursively), each matched to its candidate (`samples="all"`:
    to every sample of its candidates, one SuiteTask each)."""
    if samples not in SAMPLES:
        raise SuiteError(f"samples must be one of {', '.join(SAMPLES)}, not {samples!r}")
    root = Path(tasks_dir)
    if not root.is_dir():
        raise SuiteError(f"{root}: no such suite directory (give a folder of KernelBench-format .py files)")
    cands_root = Path(candidates_dir) if candidates_dir is not None else None
    if cands_root is not None and not cands_root.is_dir():
        raise SuiteError(f"{cands_root}: no such candidates directory")
    skip_root = cands_root.resolve() if cands_root is not None else None
    by_name = _candidate_index(cands_root) if cands_root is not None else {}
    by_problem = _problem_index(cands_root, by_name) if cands_root is not None else {}

    tasks, skipped = [], []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _ignored(rel) or (skip_root is not None and _inside(path, skip_root)):
            continue
        rel_s = rel.as_posix()
        level = level_of(rel_s)
        try:
            task = Task.from_file(path, level=level or None)
        except TaskError as e:
            skipped.append((rel_s, str(e)))
            continue
        found, note = [(None, None)], ""
        if cands_root is not None and samples == "all":
            found, note = _match_all(rel, level, cands_root, by_name, by_problem)
        elif cands_root is not None:
            cand, note = _match(rel, level, cands_root, by_name, by_problem)
            found = [(None, cand)]
        tasks += [SuiteTask(task=task, rel_path=rel_s, level=level, candidate_path=cand, note=note, sample=sample)
                  for sample, cand in found or [(None, None)]]
    if not tasks:
        detail = f" ({len(skipped)} .py files skipped: {skipped[0][1]})" if skipped else ""
        raise SuiteError(f"{root}: no KernelBench-format references found{detail}; each needs class Model, "
                         "get_inputs() and get_init_inputs()")
    return Suite(root=str(root), tasks=tuple(tasks), skipped=tuple(skipped))


def _ignored(rel: Path) -> bool:
    if rel.name == "__init__.py" or rel.name.startswith(("_", ".")):
        return True
    return any(part in _IGNORED_DIRS or part.startswith(".") for part in rel.parts[:-1])


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
        return True
    except ValueError:
        return False


def _candidate_index(cands_root: Path) -> dict[str, list[Path]]:
    index: dict[str, list[Path]] = {}
    for p in sorted(cands_root.rglob("*.py")):
        rel = p.relative_to(cands_root)
        if rel.name == "__init__.py" or any(part in ("__pycache__",) or part.startswith(".") for part in rel.parts):
            continue
        index.setdefault(p.name, []).append(p)
    return index


def problem_id(name: str) -> int | None:
    """The KernelBench problem id a file name starts with ("12_Matmul.py" -> 12), or None."""
    m = _PROBLEM.match(name)
    return int(m.group(1)) if m else None


def _problem_index(cands_root: Path, by_name: dict[str, list[Path]]) -> dict[tuple[str, int], list[tuple[int, Path]]]:
    """Candidates by (level, problem id), each with its sample number (0 where the name has none)."""
    index: dict[tuple[str, int], list[tuple[int, Path]]] = {}
    for paths in by_name.values():
        for p in paths:
            m = _GENERATED.match(p.name)
            if m:
                key, sample = (f"level{int(m.group(1))}", int(m.group(2))), int(m.group(3) or 0)
            else:
                level, pid = level_of(p.relative_to(cands_root).as_posix()), problem_id(p.name)
                if not level.startswith("level") or pid is None:
                    continue
                key, sample = (level, pid), 0
            index.setdefault(key, []).append((sample, p))
    return index


def _match(rel: Path, level: str, cands_root: Path, by_name: dict[str, list[Path]],
           by_problem: dict[tuple[str, int], list[tuple[int, Path]]]) -> tuple[str | None, str]:
    """The candidate file for the task at `rel`, or None and why none was chosen ("" when there is none)."""
    exact = cands_root / rel
    if exact.is_file():
        return str(exact), ""
    found = by_name.get(rel.name, [])
    if len(found) == 1:
        return str(found[0]), ""
    same_level = [p for p in found if level and level_of(p.relative_to(cands_root).as_posix()) == level]
    if len(same_level) == 1:
        return str(same_level[0]), ""
    if found:  # several files share the name and none is the unique one in the task's level: no guess
        return None, f"{len(found)} candidates named {rel.name} and none in {level or 'the top level'} alone"
    matches = _generated(rel, level, by_problem)
    if not matches:
        return None, ""
    lowest = [p for sample, p in matches if sample == matches[0][0]]
    if len(lowest) > 1:
        return None, _several(lowest, level, rel)
    return str(lowest[0]), ""


def _match_all(rel: Path, level: str, cands_root: Path, by_name: dict[str, list[Path]],
               by_problem: dict[tuple[str, int], list[tuple[int, Path]]]) -> tuple[list[tuple[int | None, str]], str]:
    """Every sample (number, path) of the task's generated candidates, in sample order; a candidate matched by path
    or file name is the task's only one (sample None). ([], why) where two files share a sample number."""
    matches = _generated(rel, level, by_problem)
    if not matches or (cands_root / rel).is_file() or rel.name in by_name:
        cand, note = _match(rel, level, cands_root, by_name, by_problem)
        return ([(None, cand)] if cand else []), note
    for sample in sorted({s for s, _ in matches}):
        same = [p for s, p in matches if s == sample]
        if len(same) > 1:
            return [], _several(same, level, rel)
    return [(s, str(p)) for s, p in matches], ""


def _generated(rel: Path, level: str,
               by_problem: dict[tuple[str, int], list[tuple[int, Path]]]) -> list[tuple[int, Path]]:
    """The generated candidates (sample, path) for the task at `rel`, by level and problem id, in sample order."""
    pid = problem_id(rel.name)
    return sorted(by_problem.get((level, pid), []), key=lambda sp: (sp[0], str(sp[1]))) if pid is not None else []


def _several(paths: list[Path], level: str, rel: Path) -> str:
    return (f"{len(paths)} candidates for {level} problem {problem_id(rel.name)} "
            f"({', '.join(p.name for p in paths[:3])}): no guess")
