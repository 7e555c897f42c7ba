"""Stage 1's dataset: verified programs from a real SQLite store, best first, deduplicated, as chat pairs."""
import random

import pytest

from kernelrl.search.parse import parse_reply
from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.data import reply_for, sft_examples
from kernelrl.train.prompts import contrastive_prompt
from kernelrl.verdict import Timing, Verdict

REFERENCE = ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
             "def get_inputs():\n    return [torch.randn(8)]\n\ndef get_init_inputs():\n    return []\n")
TASK = Task.from_source(REFERENCE, name="double")
OTHER = Task.from_source(REFERENCE.replace("x * 2", "x * 3"), name="triple")


def src(expr, pad=""):
    return f"import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):{pad}\n        return {expr}\n"


def judge(store, task, source, status="ok", speedup=None, reply=None, proposer="seed"):
    rec = store.add_candidate(task, source, proposer, reply=reply)
    t = Timing.from_samples([10.0], "perf_counter")
    v = (Verdict(status="ok", speedup=speedup, task=task.digest, candidate=rec.digest, reference=t,
                 candidate_timing=t) if status == "ok" else Verdict(status=status, message="wrong"))
    store.record_verdict(task, rec.digest, v)
    return store.candidate(rec.id)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.db") as s:
        for t in (TASK, OTHER):
            s.add_task(t)
        yield s


def code_of(example):
    return parse_reply(example.completion).code


def test_only_correct_programs_become_examples_fastest_first(store):
    judge(store, TASK, src("x + x"), speedup=1.2)
    judge(store, TASK, src("x * 2.0"), speedup=1.8)
    judge(store, TASK, src("x - x"), status="incorrect")
    examples = sft_examples(store, [TASK], max_per_task=5)
    assert [code_of(e) for e in examples] == [src("x * 2.0"), src("x + x")]
    assert [e.speedup for e in examples] == [1.8, 1.2]


def test_at_most_n_programs_per_task_are_kept(store):
    for i, s in enumerate((1.1, 1.5, 1.3)):
        judge(store, TASK, src(f"x * 2 + {i} * 0"), speedup=s)
    judge(store, OTHER, src("x * 3"), speedup=1.0)
    examples = sft_examples(store, [TASK, OTHER], max_per_task=2)
    assert [(e.task, e.speedup) for e in examples] == [("double", 1.5), ("double", 1.3), ("triple", 1.0)]


def test_programs_differing_only_in_blank_lines_are_one_example(store):
    judge(store, TASK, src("x + x"), speedup=1.4)
    judge(store, TASK, src("x + x", pad="\n\n   "), speedup=1.3)
    assert len(sft_examples(store, [TASK], max_per_task=5)) == 1


def test_examples_are_chat_pairs_that_trl_reads_as_prompt_and_completion(store):
    judge(store, TASK, src("x + x"), speedup=1.4)
    [e] = sft_examples(store, [TASK])
    row = e.to_row()
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert "class Model(torch.nn.Module)" in row["prompt"][1]["content"]
    assert row["completion"] == [{"role": "assistant", "content": e.completion}]


def test_a_synthesised_reply_has_the_three_sections_and_parses_back_to_the_program(store):
    rec = judge(store, TASK, src("x + x"), speedup=1.4)
    reply = reply_for(rec)
    parsed = parse_reply(reply)
    assert parsed.code == src("x + x")
    assert set(parsed.sections) == {"Performance Analysis", "Algorithm Design", "Code Implementation"}


def test_the_llm_reply_that_produced_a_program_is_kept_as_the_target(store):
    reply = "**Performance Analysis**\nx*2 is one multiply.\n\n```python\n" + src("x + x") + "```\n"
    rec = judge(store, TASK, src("x + x"), speedup=1.4, reply=reply, proposer="llm")
    assert reply_for(rec) == reply


def test_augmented_prompts_show_other_variants_but_never_the_answer(store):
    judge(store, TASK, src("x + x"), speedup=1.2)
    judge(store, TASK, src("x * 2.0"), speedup=1.8)
    judge(store, TASK, src("torch.mul(x, 2)"), speedup=0.9)
    examples = sft_examples(store, [TASK], max_per_task=1, augment=2, rng=random.Random(1))
    assert len(examples) == 3
    plain, *augmented = examples
    assert "Earlier variants" not in plain.prompt[1]["content"]
    for e in augmented:
        text = e.prompt[1]["content"]
        assert "Earlier variants" in text and src("x * 2.0").strip() not in text


def test_a_contrastive_prompt_names_the_exemplars_it_shows(store):
    a = judge(store, TASK, src("x + x"), speedup=1.2)
    b = judge(store, TASK, src("x * 2.0"), speedup=1.8)
    judge(store, TASK, src("x - x"), status="incorrect")
    p = contrastive_prompt(store, TASK, random.Random(0), k=2)
    assert sorted(p.parent_ids) == sorted([a.id, b.id])
    text = p.messages[1]["content"]
    assert "speedup 1.800x" in text and "incorrect" in text


def test_correct_programs_slower_than_the_floor_are_left_out(store):
    judge(store, TASK, src("x + x"), speedup=1.3)
    judge(store, TASK, src("x * 2.0"), speedup=0.6)
    examples = sft_examples(store, [TASK], max_per_task=5, min_speedup=1.0)
    assert [e.speedup for e in examples] == [1.3]
