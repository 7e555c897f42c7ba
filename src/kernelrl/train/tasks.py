"""The tasks a run trains on: every KernelBench-format reference under a directory."""
from __future__ import annotations

from pathlib import Path

from kernelrl.task import Task, TaskError


def load_tasks(directory: str | Path, names: tuple[str, ...] = ()) -> list[Task]:
    """References under `directory` (recursively; `candidates/` folders skipped), optionally only `names`."""
    root = Path(directory)
    if not root.is_dir():
        raise TaskError(f"{root}: no such tasks directory; set tasks.dir to a folder of KernelBench-format "
                        "references (e.g. suite/level1)")
    files = sorted(p for p in root.rglob("*.py")
                   if "candidates" not in p.relative_to(root).parts and not p.name.startswith("_"))
    if names:
        wanted = set(names)
        files = [p for p in files if p.stem in wanted]
        missing = wanted - {p.stem for p in files}
        if missing:
            raise TaskError(f"{root}: no task named {sorted(missing)}; "
                            f"available: {sorted(p.stem for p in root.rglob('*.py'))[:20]}")
    tasks = []
    for p in files:
        level = p.parent.name if p.parent.name.startswith("level") else None
        tasks.append(Task.from_file(p, level=level))
    if not tasks:
        raise TaskError(f"{root}: no KernelBench-format references (*.py defining Model) found")
    return tasks
