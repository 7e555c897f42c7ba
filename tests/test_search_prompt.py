"""The contrastive prompt."""
from kernelrl.search.contrastive import bound_outcomes
from kernelrl.search.exemplars import Exemplar
from kernelrl.search.prompt import Failure, Outcome, PromptConfig, build_messages, prompt_hash
from kernelrl.task import Task
from kernelrl.verdict import Flag, Verdict

REFERENCE = '''"""Adds one."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x + 1


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''
TASK = Task.from_source(REFERENCE, name="add_one")


def user(messages):
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


def test_the_prompt_carries_the_reference_rules_and_three_sections():
    text = user(build_messages(TASK, [], []))
    assert REFERENCE.strip() in text
    for needle in ("Performance Analysis", "Algorithm Design", "Code Implementation", "no caching",
                   "No extra CUDA streams", "Keep the precision", "same inputs"):
        assert needle in text


def test_exemplars_appear_slowest_first_with_their_measured_speedups():
    ex = [Exemplar("class ModelNew: quick = 1", 2.5), Exemplar("class ModelNew: slow = 1", 0.8)]
    text = user(build_messages(TASK, ex, []))
    order = [text.index(s) for s in ("speedup 0.800x", "slow = 1", "speedup 2.500x", "quick = 1")]
    assert order == sorted(order)
    assert "faster than the best one (2.500x)" in text


def test_failures_are_fed_back_with_status_reason_and_hack_class():
    v = Verdict(status="rejected", message="extra CUDA stream created in forward",
                flags=(Flag(check="streams", message="torch.cuda.Stream() called", hack="side_stream"),))
    text = user(build_messages(TASK, [], [Failure.from_verdict(v), Failure("compile_error", "line 3: bad syntax")]))
    assert "rejected (rejected as side_stream): extra CUDA stream" in text
    assert "streams: torch.cuda.Stream() called" in text and "compile_error: line 3: bad syntax" in text


def test_long_tracebacks_keep_their_last_lines():
    tb = "Traceback\n" + "  frame\n" * 500 + "RuntimeError: the actual cause"
    text = user(build_messages(TASK, [], [Failure("runtime_error", tb)], PromptConfig(max_failure_chars=200)))
    assert "the actual cause" in text and text.count("frame") < 40


def test_only_the_most_recent_failures_are_shown():
    fs = [Failure("incorrect", f"mismatch number {i}") for i in range(6)]
    text = user(build_messages(TASK, [], fs, PromptConfig(max_failures=2)))
    assert "mismatch number 5" in text and "mismatch number 4" in text and "mismatch number 3" not in text


def test_the_builder_is_pure_and_hashable():
    a = build_messages(TASK, [Exemplar("class ModelNew: pass", 1.2)], [])
    b = build_messages(TASK, [Exemplar("class ModelNew: pass", 1.2)], [])
    assert a == b and prompt_hash(a) == prompt_hash(b)
    assert prompt_hash(a) != prompt_hash(build_messages(TASK, [], []))


def test_the_target_sets_what_kind_of_code_is_asked_for():
    assert "load_inline" in user(build_messages(TASK, [], [], PromptConfig(target="cuda")))
    assert "@triton.jit" in user(build_messages(TASK, [], [], PromptConfig(target="triton")))


def test_every_verdict_is_listed_with_its_speedup_or_the_line_that_names_the_error():
    outcomes = [Outcome(1, "reference", "ok", 1.0), Outcome(2, "llm", "ok", 1.0071),
                Outcome(3, "llm", "compile_error", message="build: error: expected ';' before '}' token\nmore"),
                Outcome(4, "llm", "runtime_error", message="Traceback\n  frame\nRuntimeError: shape mismatch"),
                Outcome(5, "llm", "incorrect", message="output 0: max abs error 3.1 over atol 1e-05")]
    text = user(build_messages(TASK, [], [], PromptConfig(), outcomes))
    for row in ("- candidate 1 (reference): 1.000x", "- candidate 2 (llm): 1.007x",
                "- candidate 3 (llm): compile_error: build: error: expected ';' before '}' token",
                "- candidate 4 (llm): runtime_error: RuntimeError: shape mismatch",
                "- candidate 5 (llm): incorrect: output 0: max abs error 3.1"):
        assert row in text
    assert "more" not in text and "frame" not in text  # one line per candidate


def test_a_long_history_keeps_the_fastest_and_the_most_recent_verdicts():
    fast = {3: 5.0, 5: 4.0, 7: 3.0}
    outcomes = [Outcome(i, "llm", "ok", fast.get(i, 1.0 - i / 1000)) if i % 4 else
                Outcome(i, "llm", "incorrect", message="mismatch") for i in range(1, 21)]
    kept, left_out = bound_outcomes(outcomes, 6)
    assert [o.candidate_id for o in kept] == [3, 5, 7, 18, 19, 20] and left_out == 14
    assert "(14 more" in user(build_messages(TASK, [], [], PromptConfig(), kept, left_out))
    assert bound_outcomes(outcomes[:4], 6) == (outcomes[:4], 0)


def test_failures_and_exemplars_name_the_candidate_they_come_from():
    text = user(build_messages(TASK, [Exemplar("class ModelNew: pass", 1.2, candidate_id=7)],
                               [Failure("compile_error", "line 3: bad syntax", proposer="llm", candidate_id=9)]))
    assert "### Variant 1 (candidate 7): speedup 1.200x" in text
    assert "- candidate 9 (llm): compile_error: line 3: bad syntax" in text
