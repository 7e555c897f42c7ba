"""A bench run's results as they finish, one JSON line each (`results.jsonl`), so a rerun skips finished tasks.

A result is reused only for the same task (and sample) and source, the same candidate file content, the same
precision policy and the same baseline; anything else runs again. A line cut short (the run was killed while
writing) is ignored.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
from dataclasses import dataclass
from pathlib import Path

from kernelrl.bench.result import TaskResult
from kernelrl.bench.suite import SuiteTask

RESULTS_FILE = "results.jsonl"


def result_key(st: SuiteTask, policy: str, baseline: str) -> str:
    """What a finished result depends on: task name (and sample) and content, candidate content, policy and
    baseline."""
    cand = ""
    if st.candidate_path is not None:
        try:
            cand = hashlib.sha256(Path(st.candidate_path).read_bytes()).hexdigest()[:16]
        except OSError:
            cand = "unreadable"
    return "|".join((st.id, st.task.digest, cand, policy, baseline))


@dataclass(frozen=True)
class ResultLog:
    """Append-only results of one output folder."""

    path: Path

    def load(self) -> dict[str, TaskResult]:
        """Finished results by key (the last one wins); {} when there is no log yet."""
        return _parse(self.path.read_text()) if self.path.exists() else {}

    def append(self, key: str, result: TaskResult) -> None:
        """Add one finished result, on disk before this returns (a run killed next keeps it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"key": key, "result": result.to_dict()}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def reset(self) -> None:
        """Start a fresh log (a run without --resume)."""
        self.path.unlink(missing_ok=True)


PACKED = {".gz": gzip.decompress, ".xz": lzma.decompress}  # how a kept run's results may be packed


def kept_results(folder: Path) -> dict[str, TaskResult]:
    """A bench output folder's finished results by key, as `ResultLog.load` reads them: from its results.jsonl, or
    from results.jsonl.gz or results.jsonl.xz where a finished run was packed to be kept ({} when it has none)."""
    if not (folder / RESULTS_FILE).exists():
        for suffix, unpack in PACKED.items():
            packed = folder / (RESULTS_FILE + suffix)
            if packed.is_file():
                return _parse(unpack(packed.read_bytes()).decode())
    return ResultLog(folder / RESULTS_FILE).load()


def _parse(text: str) -> dict[str, TaskResult]:
    done: dict[str, TaskResult] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            done[entry["key"]] = TaskResult.from_dict(entry["result"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a killed run, or not ours
    return done
