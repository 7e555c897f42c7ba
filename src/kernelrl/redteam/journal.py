"""The red team's work on disk: one JSON line per finished piece (a task's audit, a template's verdict, an LLM
attempt), appended as it finishes, so a run that dies loses nothing and `--resume` does only what is left."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

JOURNAL = "redteam.jsonl"


def key(record: dict) -> tuple:
    """What a record finishes: its kind, the task's content digest, the policy, the device type, and its name."""
    return (record["kind"], record["digest"], record["policy"], record["device_type"], str(record.get("name", "")))


class Journal:
    """Records of finished work in a JSONL file (thread-safe appends; a torn last line is ignored)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._mended = False  # whether a line cut short at the end of the file was closed

    def load(self) -> dict[tuple, dict]:
        """Every record by `key` (a later record of the same key wins)."""
        found: dict[tuple, dict] = {}
        if not self.path.exists():
            return found
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
                found[key(record)] = record
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short when a run was killed
        return found

    def append(self, record: dict) -> None:
        line = json.dumps(record) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as f:
                if not self._mended and f.tell() > 0:
                    f.seek(-1, 2)
                    if f.read(1) != b"\n":
                        f.write(b"\n")  # the torn line stays unreadable, alone; this record starts a line of its own
                self._mended = True
                f.write(line.encode())
                f.flush()

    def drop(self, tasks: set[str]) -> list[dict]:
        """Remove the records of `tasks` (by name), so that a resumed run does their work again; the records dropped.
        The file is written anew beside and moved over the old one: a run killed meanwhile keeps one or the other."""
        kept, dropped = [], []
        with self._lock:
            if not self.path.exists():
                return dropped
            for line in self.path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short when a run was killed
                if record.get("task") in tasks:
                    dropped.append(record)
                else:
                    kept.append(line)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, self.path)
            self._mended = True
        return dropped

    def reset(self) -> None:
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._mended = True
