"""The optimisation loop end to end: a real OpenAI-compatible server on localhost, the real CPU evaluator,
a real SQLite store, and (for resuming) a real process killed with SIGKILL."""
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.search.llm import Budget, LLMClient, LLMConfig
from kernelrl.search.loop import Loop, LoopConfig, LoopError
from kernelrl.search.store import Store
from kernelrl.task import Task
from openai_stub_server import StubOpenAI

REFERENCE = '''"""Scale and shift a vector."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
'''

VARIANT = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}
'''
GOOD = [VARIANT.format(expr=e) for e in ("torch.add(x * 2.0, 1.0)", "x.mul(2.0).add_(1.0)",
                                          "torch.addcmul(torch.ones_like(x), x, torch.full_like(x, 2.0))")]
SYNTAX_ERROR = VARIANT.format(expr="x * 2.0 +")

# Small timing settings: each evaluation takes a few seconds on a 2-core CPU.
FAST_EVAL = dict(correctness_trials=1, warmup=1, timing_rounds=2, timing_precision=0, calls_per_round=3, input_sets=2,
                 recheck_speedup=1e9, timeout_s=120.0)


def reply(code: str) -> dict:
    return {"content": "## Performance Analysis\nElementwise, memory bound.\n## Algorithm Design\nFuse the ops.\n"
                       f"## Code Implementation\n```python\n{code}```\n"}


@pytest.fixture
def task(tmp_path) -> Task:
    path = tmp_path / "scale_shift.py"
    path.write_text(REFERENCE)
    return Task.from_file(path)


@pytest.fixture
def evaluator(tmp_path):
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path / "cache"), **FAST_EVAL)) as ev:
        yield ev


def run_loop(task, store, evaluator, stub, budget=None, price_in=0.0, concurrency=1, **loop_kw):
    llm = LLMClient(LLMConfig(model="stub-model", base_url=stub.base_url, api_key_env="STUB_KEY",
                              concurrency=concurrency, backoff_s=0.01, price_in_per_mtok=price_in), Budget(budget))
    cfg = dict(lookahead=0, polish=False, proposers=(), exemplars=3, exemplar_strategy="best")
    cfg.update(loop_kw)
    return Loop(task, store, {"cpu": evaluator}, llm=llm, config=LoopConfig(**cfg)).run()


def user_prompt(body: dict) -> str:
    return body["messages"][-1]["content"]


@pytest.fixture(autouse=True)
def stub_key(monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-stub")


def test_later_prompts_show_earlier_candidates_with_their_measured_speedups(task, evaluator, tmp_path):
    with StubOpenAI([reply(GOOD[0]), reply(GOOD[1]), reply(GOOD[2])]) as stub, \
            Store(tmp_path / "store.sqlite") as store:
        result = run_loop(task, store, evaluator, stub, iterations=3, proposers=("reference",))
        seed, c1, c2, c3 = store.candidates(task)
        prompts = [user_prompt(b) for b in stub.completions]
    assert result.stop_reason == "done" and len(prompts) == 3
    assert [c.status for c in (seed, c1, c2, c3)] == ["ok"] * 4
    assert f"speedup {seed.speedup:.3f}x" in prompts[0] and GOOD[0] not in prompts[0]
    for earlier in (seed, c1, c2):
        assert f"speedup {earlier.speedup:.3f}x" in prompts[2] and earlier.source.strip() in prompts[2]
    assert set(c3.parent_ids) == {seed.id, c1.id, c2.id}


def test_a_broken_reply_is_recorded_and_its_error_fed_back(task, evaluator, tmp_path):
    script = [{"content": "I would fuse the multiply and the add, but I will not write code."},
              reply(SYNTAX_ERROR), reply(GOOD[0])]
    with StubOpenAI(script) as stub, Store(tmp_path / "store.sqlite") as store:
        run_loop(task, store, evaluator, stub, iterations=3)
        no_code, bad_syntax, good = store.candidates(task)
        prompts = [user_prompt(b) for b in stub.completions]
    assert no_code.status == "compile_error" and no_code.parse_error and no_code.reply.startswith("I would fuse")
    assert "no usable code in the reply" in prompts[1]
    assert bad_syntax.status == "compile_error" and "syntax error" in bad_syntax.verdict.message
    assert bad_syntax.verdict.message.splitlines()[-1][:60] in prompts[2]
    assert good.status == "ok"


def test_a_reply_cut_at_the_token_limit_says_so(task, evaluator, tmp_path):
    cut = {"content": "## Performance Analysis\nThe kernel is memory bound and", "finish_reason": "length"}
    with StubOpenAI([cut]) as stub, Store(tmp_path / "store.sqlite") as store:
        run_loop(task, store, evaluator, stub, iterations=1)
        [rec] = store.candidates(task)
    assert rec.status == "compile_error" and "token limit" in rec.parse_error


def test_the_budget_cap_stops_the_run(task, evaluator, tmp_path):
    # Each call reports a million prompt tokens at $1 per million: $1 a call against a $2.50 budget.
    costly = {"content": "no code today", "prompt_tokens": 1_000_000, "completion_tokens": 0}
    with StubOpenAI(then=costly) as stub, Store(tmp_path / "store.sqlite") as store:
        result = run_loop(task, store, evaluator, stub, budget=2.5, price_in=1.0, iterations=10)
        spent = store.spent_usd()
        n = store.count_candidates(task, "llm")
    assert result.stop_reason == "budget"
    assert len(stub.completions) == 3 and n == 3 and spent == pytest.approx(3.0)


def test_llm_calls_overlap_each_other_and_the_evaluation(task, evaluator, tmp_path):
    script = [dict(reply(g), delay_s=1.0) for g in GOOD] + [dict(reply(GOOD[0].replace("2.0", "2.00")), delay_s=1.0)]
    with StubOpenAI(script) as stub, Store(tmp_path / "store.sqlite") as store:
        run_loop(task, store, evaluator, stub, iterations=4, concurrency=2, lookahead=None)
        recs = store.candidates(task)
    assert stub.max_in_flight == 2 and all(r.status == "ok" for r in recs)
    # Some proposal arrived while an earlier one was still being judged.
    assert any(later.created_at < earlier.finished_at for earlier, later in zip(recs, recs[1:]))


def test_patience_stops_a_run_that_stopped_improving(task, evaluator, tmp_path):
    with StubOpenAI(then={"content": "nothing to add"}) as stub, Store(tmp_path / "store.sqlite") as store:
        result = run_loop(task, store, evaluator, stub, iterations=10, patience=2)
    assert result.stop_reason == "patience" and len(stub.completions) == 2


def test_an_endpoint_that_refuses_the_key_stops_the_run_with_the_reason(task, evaluator, tmp_path):
    with StubOpenAI(then={"status": 401}) as stub, Store(tmp_path / "store.sqlite") as store:
        with pytest.raises(LoopError, match="refused the API key"):
            run_loop(task, store, evaluator, stub, iterations=5)
    assert len(stub.completions) == 1


def test_a_candidate_whose_evaluation_keeps_dying_is_recorded_as_failed(task, evaluator, tmp_path):
    with Store(tmp_path / "store.sqlite") as store:
        store.add_task(task)
        rec = store.add_candidate(task, GOOD[0], "llm")
        for _ in range(3):  # three runs died while judging it
            store.start_evaluation(task, rec.digest, "cpu")
        Loop(task, store, {"cpu": evaluator}, config=LoopConfig(proposers=(), polish=False)).run()
        judged = store.candidate(rec.id)
    assert judged.status == "runtime_error" and "interrupted 3 times" in judged.verdict.message


def test_a_run_killed_with_sigkill_resumes_without_losing_or_duplicating_work(task, tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "optimize.toml"
    eval_lines = "\n".join(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in FAST_EVAL.items())
    config.write_text(f"[loop]\nlookahead = 0\npolish = false\n\n[eval]\n{eval_lines}\n"
                      f'cache_dir = "{tmp_path / "cache"}"\n')
    with StubOpenAI([reply(GOOD[0]), reply(GOOD[1]), reply(GOOD[2])]) as stub:
        cmd = [sys.executable, "-m", "kernelrl.search.cli", task.path, "--model", "stub-model", "--base-url",
               stub.base_url, "--api-key-env", "STUB_KEY", "--iterations", "3", "--proposers", "none",
               "--out", str(out), "--config", str(config), "--quiet"]
        first = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            killed_digest = wait_for_evaluation_in_progress(out / "store.sqlite", llm_index=2, proc=first)
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        assert len(stub.completions) == 2  # the third call had not started
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "resuming: 1 evaluation(s)" in second.stderr
        completions = len(stub.completions)
    with Store(out / "store.sqlite") as store:
        llm = store.candidates(task, "llm")
        evaluations = store.verdicts(task)
        assert store.pending(task) == []
    assert completions == 3 and len(llm) == 3 and [c.source for c in llm] == [g.rstrip() + "\n" for g in GOOD]
    assert len(evaluations) == 3 and all(c.status == "ok" for c in llm)
    assert {e.digest: e.attempts for e in evaluations}[killed_digest] == 2
    assert (out / "best.py").exists() and (out / "report.md").exists()


def wait_for_evaluation_in_progress(db: Path, llm_index: int, proc, timeout_s: float = 180.0) -> str:
    """Poll the store until the llm_index-th LLM candidate is being judged; returns its digest."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode()
        if db.exists():
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                rows = con.execute(
                    "SELECT c.digest, e.status, e.attempts FROM candidates c JOIN evaluations e "
                    "ON e.task_id=c.task_id AND e.digest=c.digest WHERE c.proposer='llm' ORDER BY c.id").fetchall()
                con.close()
            except sqlite3.OperationalError:
                rows = []
            if len(rows) >= llm_index and rows[llm_index - 1][1:] == ("pending", 1):
                return rows[llm_index - 1][0]
        time.sleep(0.05)
    raise AssertionError("the run never started judging the candidate")
