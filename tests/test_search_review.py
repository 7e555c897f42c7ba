"""LLM reviews of suspicious candidates: asked for the right verdicts, parsed robustly, recorded, never trusted."""
import json

import pytest

from kernelrl.search.llm import LLMClient, LLMConfig
from kernelrl.search.review import Review, needs_review, parse_review, review
from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.verdict import Flag, Verdict
from openai_stub_server import StubOpenAI
from test_search_loop import GOOD, REFERENCE, reply, run_loop  # noqa: F401  (fixtures below reuse its helpers)
from test_search_loop import evaluator, task  # noqa: F401


def ok(speedup, *flags):
    return Verdict(status="ok", speedup=speedup, flags=tuple(flags))


def test_fast_or_warned_correct_candidates_need_a_review_and_failures_do_not():
    assert needs_review(ok(5.0), 3.0)
    assert not needs_review(ok(1.2), 3.0)
    assert needs_review(ok(1.2, Flag("static_audit", "caches outputs", hack="result_replay", severity="warn")), 3.0)
    assert not needs_review(Verdict(status="incorrect"), 0.0)


@pytest.mark.parametrize("text, expected", [
    ('{"opinion": "hack", "class": "result_replay", "reason": "caches A@B"}', ("hack", "result_replay")),
    ('Looks fine.\n```json\n{"opinion": "honest", "class": null, "reason": "same math"}\n```', ("honest", None)),
    ('{"opinion": "suspicious", "class": "not_a_class", "reason": "?"}', ("suspicious", None)),
    ('{"opinion": "great", "class": null}', ("unparsed", None)),
    ("no json at all", ("unparsed", None)),
])
def test_review_replies_are_parsed_robustly(text, expected):
    opinion, hack, _ = parse_review(text)
    assert (opinion, hack) == expected


def test_a_review_comes_from_the_llm_backend_and_shows_it_the_evidence(monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-stub")
    t = Task.from_source(REFERENCE, name="scale_shift")
    v = ok(9.0, Flag("static_audit", "module-level dict keyed on data_ptr", hack="result_replay", severity="warn"))
    answer = json.dumps({"opinion": "hack", "class": "result_replay", "reason": "line 9 caches outputs"})
    with StubOpenAI([{"content": answer}]) as stub:
        llm = LLMClient(LLMConfig(model="stub-model", base_url=stub.base_url, api_key_env="STUB_KEY"))
        r = review(llm, t, GOOD[0], v)
        sent = stub.completions[0]["messages"][-1]["content"]
    assert (r.opinion, r.hack, r.model) == ("hack", "result_replay", "stub-model")
    assert "module-level dict keyed on data_ptr" in sent and GOOD[0].strip() in sent


def test_the_loop_records_reviews_and_keeps_the_verdict(task, evaluator, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("STUB_KEY", "sk-stub")
    answer = {"content": json.dumps({"opinion": "suspicious", "class": None, "reason": "unusual"})}
    with StubOpenAI([reply(GOOD[0]), answer]) as stub, Store(tmp_path / "store.sqlite") as store:
        run_loop(task, store, evaluator, stub, iterations=1, review_speedup=0.0)
        (c,) = store.candidates(task)
        reviews = store.reviews(task)
    assert c.status == "ok"
    assert Review.from_dict(reviews[c.digest]).opinion == "suspicious"
