"""The archive of an optimisation run: tasks, candidates and their verdicts in one SQLite file (WAL).

Every candidate is written before it is evaluated, with a "pending" evaluation keyed by (task, candidate
digest); a run that stops (Ctrl-C, kill -9, power cut after a commit) resumes by evaluating what is still
pending. The same source is evaluated once, however often it is proposed. Training reads this store through
`best_candidates`, `verdicts`, `candidates` and `export_jsonl`.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelrl.search.exemplars import SCORE_CLIP, Exemplar, normalize_scores
from kernelrl.search.prompt import Failure, Outcome
from kernelrl.task import Candidate, Task, detect_language
from kernelrl.verdict import Verdict

SCHEMA_VERSION = 1
PENDING = "pending"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT NOT NULL, task TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL REFERENCES tasks(id),
    digest TEXT NOT NULL,
    source TEXT NOT NULL,
    language TEXT NOT NULL,
    parent_ids TEXT NOT NULL DEFAULT '[]',
    proposer TEXT NOT NULL,
    model TEXT,
    prompt_hash TEXT,
    prompt TEXT,
    reply TEXT,
    parse_error TEXT,
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS candidates_task ON candidates(task_id, proposer);
CREATE INDEX IF NOT EXISTS candidates_digest ON candidates(task_id, digest);
CREATE TABLE IF NOT EXISTS evaluations (
    task_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    status TEXT NOT NULL,
    speedup REAL,
    verdict TEXT,
    device TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (task_id, digest));
CREATE INDEX IF NOT EXISTS evaluations_status ON evaluations(task_id, status);
CREATE TABLE IF NOT EXISTS reviews (
    task_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    review TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (task_id, digest));
"""


class StoreError(RuntimeError):
    """A store file kernelrl cannot use, with what to do about it."""


@dataclass(frozen=True)
class CandidateRecord:
    """A stored candidate with its evaluation (status 'pending' until judged)."""

    id: int
    task_id: str
    digest: str
    source: str
    language: str
    proposer: str
    parent_ids: tuple[int, ...]
    model: str | None
    prompt_hash: str | None
    prompt: list | None
    reply: str | None
    parse_error: str | None
    tokens_in: int
    tokens_out: int
    cost_usd: float
    created_at: float
    status: str
    speedup: float | None
    verdict: Verdict | None
    finished_at: float | None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        d["parent_ids"] = list(self.parent_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CandidateRecord":
        d = dict(d)
        d["verdict"] = Verdict.from_dict(d["verdict"]) if d.get("verdict") else None
        d["parent_ids"] = tuple(d.get("parent_ids", ()))
        return cls(**d)


@dataclass(frozen=True)
class Evaluation:
    """The evaluation of one distinct source of a task (whichever candidates proposed it)."""

    task_id: str
    digest: str
    status: str
    speedup: float | None
    verdict: Verdict | None
    device: str | None
    attempts: int
    created_at: float
    finished_at: float | None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.to_dict() if self.verdict else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Evaluation":
        d = dict(d)
        d["verdict"] = Verdict.from_dict(d["verdict"]) if d.get("verdict") else None
        return cls(**d)


def no_code_digest(reply: str) -> str:
    """The key of a reply that held no usable code (16 hex digits, distinct from any source digest)."""
    return "x" + hashlib.sha256(reply.encode()).hexdigest()[:15]


class Store:
    """SQLite archive; safe to share between the threads of one process and across processes (WAL)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0,
                                       isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # durable across process kills in WAL mode
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a kernelrl store ({e}); choose another --out directory") from e
        if row is None:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row["value"]) != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema {row['value']}, this kernelrl reads {SCHEMA_VERSION}; "
                             "use a new --out directory")
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- writing -------------------------------------------------------------------------------------------

    def add_task(self, task: Task) -> str:
        """Record a task (idempotent); returns its id (the task digest)."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?, ?)",
                             (task.digest, task.name, task.source, json.dumps(task.to_dict()), time.time()))
        return task.digest

    def add_candidate(self, task: Task | str, source: str | None, proposer: str, *, parent_ids=(),
                      model: str | None = None, prompt: list | None = None, prompt_hash: str | None = None,
                      reply: str | None = None, parse_error: str | None = None, tokens_in: int = 0,
                      tokens_out: int = 0, cost_usd: float = 0.0, unique: bool = False) -> CandidateRecord:
        """Record a proposal and, in the same transaction, its pending evaluation (shared by equal sources).

        A proposal without code (`source=None`) is recorded with a finished compile_error verdict that carries
        `parse_error`. With `unique=True` an existing candidate of the same proposer and source is returned
        instead of a new row (re-running a deterministic proposer after a restart adds nothing).
        """
        tid = _tid(task)
        now = time.time()
        if source is None:
            digest, language = no_code_digest(reply or ""), "none"
        else:
            digest, language = Candidate(source=source).digest, detect_language(source)
        with self._lock, self._tx():
            if unique:
                row = self._db.execute("SELECT id FROM candidates WHERE task_id=? AND digest=? AND proposer=?",
                                       (tid, digest, proposer)).fetchone()
                if row:
                    return self._candidate(row["id"])
            cur = self._db.execute(
                "INSERT INTO candidates (task_id, digest, source, language, parent_ids, proposer, model, "
                "prompt_hash, prompt, reply, parse_error, tokens_in, tokens_out, cost_usd, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (tid, digest, source or "", language, json.dumps([int(p) for p in parent_ids]), proposer, model,
                 prompt_hash, json.dumps(prompt) if prompt is not None else None, reply, parse_error,
                 tokens_in, tokens_out, cost_usd, now))
            if source is None:
                verdict = Verdict(status="compile_error", message=f"no usable code in the reply: {parse_error}",
                                  task=task.name if isinstance(task, Task) else tid, candidate=digest)
                self._db.execute("INSERT OR IGNORE INTO evaluations VALUES (?, ?, ?, NULL, ?, NULL, 0, ?, ?)",
                                 (tid, digest, verdict.status, verdict.to_json(), now, now))
            else:
                self._db.execute("INSERT OR IGNORE INTO evaluations (task_id, digest, status, created_at) "
                                 "VALUES (?, ?, ?, ?)", (tid, digest, PENDING, now))
            return self._candidate(cur.lastrowid)

    def start_evaluation(self, task: Task | str, digest: str, device: str) -> int:
        """Mark an evaluation as started on a device; returns how many times it has been started."""
        with self._lock, self._tx():
            self._db.execute("UPDATE evaluations SET attempts = attempts + 1, device=? WHERE task_id=? AND digest=?",
                             (device, _tid(task), digest))
            row = self._db.execute("SELECT attempts FROM evaluations WHERE task_id=? AND digest=?",
                                   (_tid(task), digest)).fetchone()
        return int(row["attempts"]) if row else 0

    def abandon_evaluation(self, task: Task | str, digest: str) -> None:
        """Undo one start of an evaluation stopped on purpose (Ctrl-C), so it does not count as interrupted."""
        with self._lock, self._tx():
            self._db.execute("UPDATE evaluations SET attempts = MAX(attempts - 1, 0) WHERE task_id=? AND digest=? "
                             "AND status=?", (_tid(task), digest, PENDING))

    def record_verdict(self, task: Task | str, digest: str, verdict: Verdict) -> None:
        """Store the verdict of a pending evaluation (a second verdict for the same key is ignored)."""
        with self._lock, self._tx():
            self._db.execute(
                "UPDATE evaluations SET status=?, speedup=?, verdict=?, device=?, finished_at=? "
                "WHERE task_id=? AND digest=? AND status=?",
                (verdict.status, verdict.speedup, verdict.to_json(), verdict.device, time.time(), _tid(task), digest,
                 PENDING))

    def record_review(self, task: Task | str, digest: str, review) -> None:
        """Store an LLM's opinion of a judged candidate (a search.review.Review); the verdict stays as it was."""
        with self._lock, self._tx():
            self._db.execute("INSERT OR REPLACE INTO reviews (task_id, digest, review, created_at) VALUES (?,?,?,?)",
                             (_tid(task), digest, json.dumps(review.to_dict()), time.time()))

    def reviews(self, task: Task | str) -> dict[str, dict]:
        """Recorded reviews of the task's candidates: digest -> the review as a dict."""
        with self._lock:
            rows = self._db.execute("SELECT digest, review FROM reviews WHERE task_id=?", (_tid(task),)).fetchall()
        return {r["digest"]: json.loads(r["review"]) for r in rows}

    # ---- reading -------------------------------------------------------------------------------------------

    def tasks(self) -> list[Task]:
        """Every task in the store."""
        with self._lock:
            rows = self._db.execute("SELECT task FROM tasks ORDER BY created_at").fetchall()
        return [Task.from_dict(json.loads(r["task"])) for r in rows]

    def task(self, task_id: str) -> Task:
        """The task with this id (digest) or name."""
        with self._lock:
            row = self._db.execute("SELECT task FROM tasks WHERE id=? OR name=? ORDER BY created_at DESC",
                                   (task_id, task_id)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no task {task_id!r}")
        return Task.from_dict(json.loads(row["task"]))

    def pending(self, task: Task | str) -> list[CandidateRecord]:
        """One candidate per distinct source still waiting for its verdict, oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"{_SELECT} WHERE c.task_id=? AND e.status=? AND c.id = (SELECT MIN(id) FROM candidates "
                "WHERE task_id=c.task_id AND digest=c.digest) ORDER BY c.id", (_tid(task), PENDING)).fetchall()
        return [_record(r) for r in rows]

    def candidate(self, candidate_id: int) -> CandidateRecord:
        """One candidate by id."""
        with self._lock:
            return self._candidate(candidate_id)

    def candidates(self, task: Task | str, proposer: str | None = None) -> list[CandidateRecord]:
        """Every candidate of a task (optionally of one proposer), in the order they were proposed."""
        q, args = f"{_SELECT} WHERE c.task_id=?", [_tid(task)]
        if proposer is not None:
            q += " AND c.proposer=?"
            args.append(proposer)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY c.id", args).fetchall()
        return [_record(r) for r in rows]

    def count_candidates(self, task: Task | str, proposer_prefix: str = "") -> int:
        """How many candidates of the task were proposed (by proposers whose name starts with the prefix)."""
        with self._lock:
            row = self._db.execute("SELECT COUNT(*) AS n FROM candidates WHERE task_id=? AND proposer LIKE ?",
                                   (_tid(task), proposer_prefix.replace("%", "") + "%")).fetchone()
        return int(row["n"])

    def verdicts(self, task: Task | str) -> list[Evaluation]:
        """The finished evaluations of a task, in the order they finished."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM evaluations WHERE task_id=? AND status != ? ORDER BY finished_at",
                                    (_tid(task), PENDING)).fetchall()
        return [_evaluation(r) for r in rows]

    def best_candidates(self, task: Task | str, n: int = 1) -> list[CandidateRecord]:
        """The n fastest verified candidates, one per distinct source, fastest first."""
        with self._lock:
            rows = self._db.execute(
                f"{_SELECT} WHERE c.task_id=? AND e.status='ok' AND c.id = (SELECT MIN(id) FROM candidates "
                "WHERE task_id=c.task_id AND digest=c.digest) ORDER BY e.speedup DESC, c.id LIMIT ?",
                (_tid(task), n)).fetchall()
        return [_record(r) for r in rows]

    def exemplar_pool(self, task: Task | str) -> list[Exemplar]:
        """Every verified distinct source of the task as an Exemplar."""
        return [Exemplar(source=c.source, speedup=float(c.speedup), candidate_id=c.id, proposer=c.proposer)
                for c in self.best_candidates(task, n=1_000_000)]

    def recent_failures(self, task: Task | str, n: int = 3) -> list[Failure]:
        """The last n finished evaluations that did not pass, oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT e.verdict, {_FIRST_PROPOSAL} FROM evaluations e "
                "WHERE e.task_id=? AND e.status NOT IN ('ok', ?) ORDER BY e.finished_at DESC LIMIT ?",
                (_tid(task), PENDING, n)).fetchall()
        return [Failure.from_verdict(Verdict.from_json(r["verdict"]), proposer=r["proposer"] or "",
                                     candidate_id=r["candidate_id"]) for r in reversed(rows)]

    def outcomes(self, task: Task | str) -> list[Outcome]:
        """Every finished evaluation of the task, in the order they finished, under the first candidate that
        proposed its source."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT e.status, e.speedup, e.verdict, {_FIRST_PROPOSAL} FROM evaluations e "
                "WHERE e.task_id=? AND e.status != ? ORDER BY e.finished_at, e.rowid",
                (_tid(task), PENDING)).fetchall()
        return [Outcome(candidate_id=r["candidate_id"], proposer=r["proposer"] or "", status=r["status"],
                        speedup=r["speedup"],
                        message="" if r["status"] == "ok" else Verdict.from_json(r["verdict"]).message)
                for r in rows if r["candidate_id"] is not None]

    def lineage(self, candidate_id: int, depth: int = 8) -> list[tuple[int, CandidateRecord]]:
        """The candidate and its ancestors (parents shown in its prompt), depth-first, as (level, record)."""
        out: list[tuple[int, CandidateRecord]] = []
        seen: set[int] = set()

        def walk(cid: int, level: int) -> None:
            if cid in seen or level > depth:
                return
            seen.add(cid)
            rec = self.candidate(cid)
            out.append((level, rec))
            for p in rec.parent_ids:
                walk(p, level + 1)

        walk(candidate_id, 0)
        return out

    def stats(self, task: Task | str) -> dict:
        """Counts and totals for progress displays: evaluations by status, proposals, tokens, cost (USD)."""
        tid = _tid(task)
        with self._lock:
            by_status = {r["status"]: r["n"] for r in self._db.execute(
                "SELECT status, COUNT(*) AS n FROM evaluations WHERE task_id=? GROUP BY status", (tid,))}
            tot = self._db.execute(
                "SELECT COUNT(*) AS n, COALESCE(SUM(tokens_in),0) AS tin, COALESCE(SUM(tokens_out),0) AS tout, "
                "COALESCE(SUM(cost_usd),0) AS cost, COALESCE(SUM(model IS NOT NULL),0) AS llm "
                "FROM candidates WHERE task_id=?", (tid,)).fetchone()
            best = self._db.execute("SELECT MAX(speedup) AS s FROM evaluations WHERE task_id=? AND status='ok'",
                                    (tid,)).fetchone()["s"]
        return {"by_status": by_status, "candidates": tot["n"], "llm_candidates": tot["llm"],
                "tokens_in": tot["tin"], "tokens_out": tot["tout"], "cost_usd": tot["cost"], "best_speedup": best}

    def spent_usd(self) -> float:
        """Total LLM cost recorded in the store (all tasks), in USD."""
        with self._lock:
            return float(self._db.execute("SELECT COALESCE(SUM(cost_usd),0) AS c FROM candidates").fetchone()["c"])

    def export_jsonl(self, path: str | Path, task: Task | str | None = None, llm_only: bool = False) -> int:
        """Write one JSON line per judged candidate (prompt, reply, source, verdict, reward); returns the count.

        `reward` is the per-task normalised score of the speedup ((r−μ)/σ over the task's verified sources,
        clipped to ±1.5); candidates that failed get −1.5.
        """
        tasks = [_tid(task)] if task is not None else [t.digest for t in self.tasks()]
        n = 0
        with open(path, "w") as f:
            for tid in tasks:
                recs = [c for c in self.candidates(tid) if c.status != PENDING]
                ok = {c.digest: c.speedup for c in recs if c.status == "ok"}
                digests = list(ok)
                norm = dict(zip(digests, normalize_scores([ok[d] for d in digests])))
                name = self.task(tid).name
                for c in recs:
                    if llm_only and c.prompt is None:
                        continue
                    row = {"task_id": tid, "task": name, "candidate_id": c.id, "proposer": c.proposer,
                           "model": c.model, "parent_ids": list(c.parent_ids), "prompt": c.prompt, "reply": c.reply,
                           "source": c.source, "status": c.status, "speedup": c.speedup,
                           "reward": norm.get(c.digest, -SCORE_CLIP) if c.status == "ok" else -SCORE_CLIP,
                           "verdict": c.verdict.to_dict() if c.verdict else None}
                    f.write(json.dumps(row) + "\n")
                    n += 1
        return n

    # ---- internals -----------------------------------------------------------------------------------------

    def _candidate(self, candidate_id: int) -> CandidateRecord:
        row = self._db.execute(f"{_SELECT} WHERE c.id=?", (candidate_id,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no candidate {candidate_id}")
        return _record(row)

    def _tx(self):
        return Transaction(self._db)


class Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


# The first candidate that proposed an evaluation's source: its id and proposer, for rows of `evaluations e`.
_FIRST_PROPOSAL = ("(SELECT id FROM candidates c WHERE c.task_id=e.task_id AND c.digest=e.digest ORDER BY c.id "
                   "LIMIT 1) AS candidate_id, (SELECT proposer FROM candidates c WHERE c.task_id=e.task_id AND "
                   "c.digest=e.digest ORDER BY c.id LIMIT 1) AS proposer")

_SELECT = ("SELECT c.*, e.status AS status, e.speedup AS speedup, e.verdict AS verdict, e.finished_at AS finished_at "
           "FROM candidates c JOIN evaluations e ON e.task_id = c.task_id AND e.digest = c.digest")


def _record(r: sqlite3.Row) -> CandidateRecord:
    return CandidateRecord(
        id=r["id"], task_id=r["task_id"], digest=r["digest"], source=r["source"], language=r["language"],
        proposer=r["proposer"], parent_ids=tuple(json.loads(r["parent_ids"])), model=r["model"],
        prompt_hash=r["prompt_hash"], prompt=json.loads(r["prompt"]) if r["prompt"] else None, reply=r["reply"],
        parse_error=r["parse_error"], tokens_in=r["tokens_in"], tokens_out=r["tokens_out"], cost_usd=r["cost_usd"],
        created_at=r["created_at"], status=r["status"], speedup=r["speedup"],
        verdict=Verdict.from_json(r["verdict"]) if r["verdict"] else None, finished_at=r["finished_at"])


def _evaluation(r: sqlite3.Row) -> Evaluation:
    return Evaluation(task_id=r["task_id"], digest=r["digest"], status=r["status"], speedup=r["speedup"],
                      verdict=Verdict.from_json(r["verdict"]) if r["verdict"] else None, device=r["device"],
                      attempts=r["attempts"], created_at=r["created_at"], finished_at=r["finished_at"])


def _tid(task: Task | str) -> str:
    return task.digest if isinstance(task, Task) else task
