"""Cached reference timings (eager and torch.compile) per task, device and software version, in SQLite.

A timing is reused only when everything it depends on matches: the task's content digest, the device's
name, the torch/CUDA/Python versions, kernelrl's version and the timing settings. Anything else re-times.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sqlite3
import sys
import time
from dataclasses import asdict
from contextlib import closing
from pathlib import Path

import torch

import kernelrl
from kernelrl.evaluate.config import EvalConfig
from kernelrl.verdict import Timing

_SCHEMA = """
CREATE TABLE IF NOT EXISTS baseline (
    task_digest TEXT NOT NULL,
    environment TEXT NOT NULL,
    compiled INTEGER NOT NULL,
    task TEXT NOT NULL,
    timing TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (task_digest, environment, compiled)
)
"""


def device_name(device: str) -> str:
    """A name for the hardware behind `device`: the GPU's name, or the CPU's model."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu {model}"


def environment_key(device: str, config: EvalConfig) -> str:
    """What a reference timing depends on besides the task: hardware, software versions, timing settings."""
    parts = {
        "device": device_name(device),
        "torch": torch.__version__, "cuda": str(torch.version.cuda), "python": sys.version.split()[0],
        "kernelrl": kernelrl.__version__,
        "timing": [config.warmup, config.timing_rounds, config.calls_per_round, config.input_sets,
                   config.flush_l2, config.use_graphs, config.timing_basis],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


class BaselineCache:
    """Reference timings in one SQLite file; safe to share between threads (one connection per call)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def get(self, task_digest: str, environment: str, compiled: bool) -> Timing | None:
        """The cached Timing, or None."""
        with closing(self._connect()) as db:
            row = db.execute("SELECT timing FROM baseline WHERE task_digest=? AND environment=? AND compiled=?",
                             (task_digest, environment, int(compiled))).fetchone()
        return Timing.from_dict(json.loads(row[0])) if row else None

    def put(self, task_digest: str, environment: str, compiled: bool, timing: Timing, task: str = "") -> None:
        """Store (or replace) a Timing."""
        with closing(self._connect()) as db, db:
            db.execute("INSERT OR REPLACE INTO baseline VALUES (?, ?, ?, ?, ?, ?)",
                       (task_digest, environment, int(compiled), task, json.dumps(asdict(timing)), time.time()))

    def __len__(self) -> int:
        with closing(self._connect()) as db:
            return db.execute("SELECT COUNT(*) FROM baseline").fetchone()[0]
