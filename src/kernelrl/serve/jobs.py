"""The service's durable job queue: accepted evaluations and their verdicts in one SQLite file (WAL).

A job is `queued` until the dispatcher hands it to the scheduler, `running` until its verdict arrives, then
`done` (a Verdict) or `failed` (the evaluation itself could not run: not the candidate's fault). A process
killed at any point loses nothing: on start, jobs left `running` are queued again, and a verdict is written
once per job, in the same transaction that marks the job done, so a job run twice still counts once.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelrl.search.store import Transaction  # BEGIN IMMEDIATE … COMMIT, as the search store
from kernelrl.task import Candidate, Task
from kernelrl.verdict import Verdict

STATES = ("queued", "running", "done", "failed")
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL,              -- what an identical request would share (JobStore.key)
    task TEXT NOT NULL,             -- Task JSON: the job runs without the suite it came from
    candidate TEXT NOT NULL,        -- Candidate JSON
    policy TEXT NOT NULL,
    state TEXT NOT NULL,
    reusable INTEGER NOT NULL,      -- 0: asked to bypass the cache; never answers another request
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, submitted_at);
CREATE INDEX IF NOT EXISTS jobs_key ON jobs (key);
-- Append-only on purpose: exactly-once is a property of the writer (JobStore.finish), checked by counting.
CREATE TABLE IF NOT EXISTS verdicts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs (id),
    verdict TEXT NOT NULL,
    written_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS verdicts_job ON verdicts (job_id);
"""


class JobStoreError(RuntimeError):
    """A job database that cannot be used, with what to do about it."""


@dataclass(frozen=True)
class Job:
    """One accepted evaluation and, once done, its verdict."""

    id: str
    state: str
    task: str                       # task name
    policy: str
    attempts: int = 0
    verdict: Verdict | None = None
    error: str | None = None        # why a `failed` job has no verdict
    submitted_at: float = 0.0       # Unix seconds
    finished_at: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        d = dict(d)
        d["verdict"] = Verdict.from_dict(d["verdict"]) if d.get("verdict") else None
        return cls(**d)


@dataclass(frozen=True)
class Counts:
    """Jobs per state, and verdicts written in the last minute."""

    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    last_minute: int = 0


class JobStore:
    """The job table; safe to share between the threads of one process."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0,
                                       isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # an accepted job survives a power cut, not only a kill
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except (sqlite3.DatabaseError, OSError) as e:
            raise JobStoreError(f"{self.path}: cannot open the job database ({e}); choose another --db") from e
        if row is None:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row["value"]) != SCHEMA_VERSION:
            raise JobStoreError(f"{self.path}: job database schema {row['value']}, this kernelrl reads "
                                f"{SCHEMA_VERSION}; choose another --db")
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @staticmethod
    def key(task: Task, candidate: Candidate, policy: str, context: str) -> str:
        """What identical requests share: task and candidate digests, policy, and the server's `context` (device
        kind, toolchain, evaluator settings)."""
        parts = (task.digest, candidate.digest, policy, context)
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]

    # -- writing ------------------------------------------------------------------------------------------
    def add(self, jobs: list[tuple[Task, Candidate, str, str, bool]]) -> list[tuple[str, bool]]:
        """Accept (task, candidate, policy, key, reuse) jobs, all in one transaction; returns (id, cached) for
        each. With `reuse`, a job with the same key that is queued, running or done answers instead (its id,
        cached True)."""
        out = []
        with self._lock, Transaction(self._db):
            for task, candidate, policy, key, reuse in jobs:
                row = self._db.execute(
                    "SELECT id FROM jobs WHERE key=? AND reusable=1 AND state!='failed' "
                    "ORDER BY submitted_at LIMIT 1", (key,)).fetchone() if reuse else None
                if row is not None:
                    out.append((row["id"], True))
                    continue
                job_id = uuid.uuid4().hex
                self._db.execute(
                    "INSERT INTO jobs (id, key, task, candidate, policy, state, reusable, submitted_at) "
                    "VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
                    (job_id, key, json.dumps(task.to_dict()), json.dumps(candidate.to_dict()), policy, int(reuse),
                     time.time()))
                out.append((job_id, False))
        return out

    def requeue_running(self) -> int:
        """Queue again every job a previous process left running (it died before the verdict); returns how many."""
        with self._lock, Transaction(self._db):
            return self._db.execute("UPDATE jobs SET state='queued' WHERE state='running'").rowcount

    def claim(self, n: int) -> list[tuple[str, Task, Candidate, str]]:
        """Mark up to `n` oldest queued jobs running; returns (id, task, candidate, policy) for each."""
        if n <= 0:
            return []
        with self._lock, Transaction(self._db):
            rows = self._db.execute("SELECT id, task, candidate, policy FROM jobs WHERE state='queued' "
                                    "ORDER BY submitted_at LIMIT ?", (n,)).fetchall()
            now = time.time()
            for r in rows:
                self._db.execute("UPDATE jobs SET state='running', started_at=?, attempts=attempts+1 WHERE id=?",
                                 (now, r["id"]))
        return [(r["id"], Task.from_dict(json.loads(r["task"])), Candidate.from_dict(json.loads(r["candidate"])),
                 r["policy"]) for r in rows]

    def finish(self, job_id: str, verdict: Verdict) -> bool:
        """Record the job's verdict unless it already has one; True when this call wrote it."""
        with self._lock, Transaction(self._db):
            now = time.time()
            cur = self._db.execute("UPDATE jobs SET state='done', finished_at=?, error=NULL "
                                   "WHERE id=? AND state IN ('queued', 'running')", (now, job_id))
            if cur.rowcount != 1:
                return False
            self._db.execute("INSERT INTO verdicts (job_id, verdict, written_at) VALUES (?, ?, ?)",
                             (job_id, verdict.to_json(), now))
            return True

    def fail(self, job_id: str, error: str) -> bool:
        """Mark the job failed (no verdict: the evaluation could not run); True when this call did."""
        with self._lock, Transaction(self._db):
            cur = self._db.execute("UPDATE jobs SET state='failed', finished_at=?, error=? "
                                   "WHERE id=? AND state IN ('queued', 'running')", (time.time(), error, job_id))
            return cur.rowcount == 1

    # -- reading ------------------------------------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._db.execute(
                "SELECT j.*, v.verdict FROM jobs j LEFT JOIN verdicts v ON v.job_id = j.id WHERE j.id=? "
                "ORDER BY v.seq LIMIT 1", (job_id,)).fetchone()
        if row is None:
            return None
        return Job(id=row["id"], state=row["state"], task=json.loads(row["task"])["name"], policy=row["policy"],
                   attempts=row["attempts"], verdict=Verdict.from_json(row["verdict"]) if row["verdict"] else None,
                   error=row["error"], submitted_at=row["submitted_at"], finished_at=row["finished_at"])

    def counts(self) -> Counts:
        with self._lock:
            by_state = dict(self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
            recent = self._db.execute("SELECT COUNT(*) FROM verdicts WHERE written_at >= ?",
                                      (time.time() - 60.0,)).fetchone()[0]
        return Counts(**{s: by_state.get(s, 0) for s in STATES}, last_minute=recent)

    def verdict_counts(self) -> dict[str, int]:
        """Job id -> verdicts written for it, for every job (0 for those without one)."""
        with self._lock:
            rows = self._db.execute("SELECT j.id, COUNT(v.seq) FROM jobs j LEFT JOIN verdicts v "
                                    "ON v.job_id = j.id GROUP BY j.id").fetchall()
        return {r[0]: r[1] for r in rows}
