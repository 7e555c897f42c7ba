"""The SQLite archive: candidates, idempotent evaluations, queries for training, JSONL export."""
import json
import sqlite3

import pytest

from kernelrl.search.store import PENDING, Store, StoreError
from kernelrl.task import Task
from kernelrl.verdict import Timing, Verdict

REFERENCE = ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n\n"
             "def get_inputs():\n    return [torch.randn(8)]\n\ndef get_init_inputs():\n    return []\n")
TASK = Task.from_source(REFERENCE, name="add_one")


def src(n):
    return f"import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + {n}\n"


def ok(rec, speedup):
    t = Timing.from_samples([10.0], "perf_counter")
    return Verdict(status="ok", speedup=speedup, task=TASK.digest, candidate=rec.digest, reference=t,
                   candidate_timing=t)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.sqlite") as s:
        s.add_task(TASK)
        yield s


def test_a_new_candidate_is_pending_until_its_verdict_is_recorded(store):
    rec = store.add_candidate(TASK, src(1), "llm")
    assert rec.status == PENDING and [p.id for p in store.pending(TASK)] == [rec.id]
    store.record_verdict(TASK, rec.digest, ok(rec, 1.5))
    assert store.pending(TASK) == [] and store.candidate(rec.id).speedup == 1.5


def test_equal_sources_share_one_evaluation(store):
    a = store.add_candidate(TASK, src(1), "llm")
    b = store.add_candidate(TASK, src(1), "llm")
    assert a.id != b.id and a.digest == b.digest and len(store.pending(TASK)) == 1
    store.record_verdict(TASK, a.digest, ok(a, 2.0))
    assert store.candidate(b.id).speedup == 2.0 and len(store.verdicts(TASK)) == 1


def test_a_second_verdict_for_the_same_source_is_ignored(store):
    a = store.add_candidate(TASK, src(1), "llm")
    store.record_verdict(TASK, a.digest, ok(a, 2.0))
    store.record_verdict(TASK, a.digest, Verdict(status="incorrect", message="late duplicate"))
    assert store.candidate(a.id).status == "ok"


def test_unique_proposals_are_not_added_twice(store):
    a = store.add_candidate(TASK, src(1), "reference", unique=True)
    b = store.add_candidate(TASK, src(1), "reference", unique=True)
    assert a.id == b.id and store.count_candidates(TASK) == 1


def test_a_reply_without_code_is_a_judged_compile_error(store):
    rec = store.add_candidate(TASK, None, "llm", reply="no idea", parse_error="the reply has no code block")
    assert rec.status == "compile_error" and "no code block" in rec.verdict.message
    assert store.pending(TASK) == []


def test_best_candidates_are_distinct_and_fastest_first(store):
    recs = [store.add_candidate(TASK, src(i), "llm") for i in range(3)]
    store.add_candidate(TASK, src(2), "llm")
    for rec, s in zip(recs, (1.2, 0.9, 3.0)):
        store.record_verdict(TASK, rec.digest, ok(rec, s))
    assert [c.speedup for c in store.best_candidates(TASK, 5)] == [3.0, 1.2, 0.9]


def test_recent_failures_carry_the_verdict_message(store):
    rec = store.add_candidate(TASK, src(1), "llm")
    store.record_verdict(TASK, rec.digest, Verdict(status="incorrect", message="output 0 mismatched"))
    [f] = store.recent_failures(TASK)
    assert (f.status, f.message, f.proposer) == ("incorrect", "output 0 mismatched", "llm")


def test_outcomes_list_every_finished_evaluation_in_the_order_judged(store):
    slow, broken, fast, pending = (store.add_candidate(TASK, src(n), p) for n, p in
                                   ((1, "reference"), (2, "llm"), (3, "llm"), (4, "llm")))
    store.add_candidate(TASK, src(3), "llm")  # the same source again: still one evaluation, under the first id
    store.record_verdict(TASK, fast.digest, ok(fast, 2.0))
    store.record_verdict(TASK, broken.digest, Verdict(status="compile_error", message="syntax error at line 2"))
    store.record_verdict(TASK, slow.digest, ok(slow, 1.0))
    outcomes = store.outcomes(TASK)
    assert [(o.candidate_id, o.proposer, o.status, o.speedup) for o in outcomes] == [
        (fast.id, "llm", "ok", 2.0), (broken.id, "llm", "compile_error", None), (slow.id, "reference", "ok", 1.0)]
    assert outcomes[1].message == "syntax error at line 2" and pending.id not in [o.candidate_id for o in outcomes]
    assert [f.candidate_id for f in store.recent_failures(TASK)] == [broken.id]


def test_start_evaluation_counts_attempts(store):
    rec = store.add_candidate(TASK, src(1), "llm")
    assert store.start_evaluation(TASK, rec.digest, "cpu") == 1
    assert store.start_evaluation(TASK, rec.digest, "cpu") == 2


def test_lineage_follows_parent_ids(store):
    a = store.add_candidate(TASK, src(1), "reference")
    b = store.add_candidate(TASK, src(2), "llm", parent_ids=[a.id])
    c = store.add_candidate(TASK, src(3), "llm", parent_ids=[b.id, a.id])
    assert [(lvl, r.id) for lvl, r in store.lineage(c.id)] == [(0, c.id), (1, b.id), (2, a.id)]


def test_export_writes_prompt_reply_verdict_and_normalised_reward(store, tmp_path):
    msgs = [{"role": "user", "content": "faster please"}]
    recs = [store.add_candidate(TASK, src(i), "llm", prompt=msgs, reply=f"reply {i}", model="m") for i in range(3)]
    for rec, s in zip(recs[:2], (1.0, 3.0)):
        store.record_verdict(TASK, rec.digest, ok(rec, s))
    store.record_verdict(TASK, recs[2].digest, Verdict(status="incorrect", message="wrong"))
    n = store.export_jsonl(tmp_path / "out.jsonl", TASK)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert n == 3 and rows[0]["prompt"] == msgs and rows[1]["reply"] == "reply 1"
    assert [r["reward"] for r in rows] == [-1.0, 1.0, -1.5]
    assert rows[2]["verdict"]["status"] == "incorrect"


def test_the_store_survives_reopening(tmp_path):
    with Store(tmp_path / "s.sqlite") as s:
        s.add_task(TASK)
        rec = s.add_candidate(TASK, src(1), "llm", tokens_in=10, cost_usd=0.25)
    with Store(tmp_path / "s.sqlite") as s:
        assert s.pending(TASK)[0].id == rec.id and s.spent_usd() == 0.25 and s.task("add_one") == TASK


def test_a_file_that_is_not_a_store_is_refused(tmp_path):
    (tmp_path / "junk.sqlite").write_text("not a database at all" * 100)
    with pytest.raises(StoreError, match="not a kernelrl store"):
        Store(tmp_path / "junk.sqlite")


def test_the_store_is_in_wal_mode(tmp_path):
    Store(tmp_path / "s.sqlite").close()
    assert sqlite3.connect(tmp_path / "s.sqlite").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_abandoned_evaluation_does_not_count_as_an_attempt(store):
    rec = store.add_candidate(TASK, src(1), "llm")
    store.start_evaluation(TASK, rec.digest, "cpu")
    store.abandon_evaluation(TASK, rec.digest)
    assert store.start_evaluation(TASK, rec.digest, "cpu") == 1
