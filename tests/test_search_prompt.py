"""The contrastive prompt."""
from kernelrl.search.exemplars import Exemplar
from kernelrl.search.prompt import Failure, PromptConfig, build_messages, prompt_hash
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
