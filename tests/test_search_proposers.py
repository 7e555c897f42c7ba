"""Non-LLM proposers: honest rewrites that the evaluator judges like any other candidate."""
import pytest

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.search.proposers import PROPOSERS, resolve
from kernelrl.task import Candidate, Task

CONV = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(2, 4, 12, 12)]


def get_init_inputs():
    return [4, 8]
'''
# A candidate in the common KernelBench style: super(ModelNew, self) inside its own __init__.
CONV_CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, c_in, c_out):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x):
        return torch.clamp_min(self.conv(x), 0.0)
'''
MLP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a = nn.Linear(d, 4 * d)
        self.b = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256]
'''
FAST = dict(correctness_trials=1, warmup=1, timing_rounds=2, calls_per_round=3, input_sets=2, recheck_speedup=1e9,
            timing_precision=0)


@pytest.fixture(scope="module")
def cpu_evaluator(tmp_path_factory):
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path_factory.mktemp("cache")), **FAST)) as ev:
        yield ev


def test_channels_last_on_the_reference_is_judged_correct(cpu_evaluator):
    task = Task.from_source(CONV, name="conv_relu")
    v = cpu_evaluator.evaluate(task, Candidate.from_source(PROPOSERS["channels-last"].propose(task)))
    assert v.status == "ok", v.message


def test_wrapping_an_earlier_candidate_keeps_it_correct(cpu_evaluator):
    task = Task.from_source(CONV, name="conv_relu")
    source = PROPOSERS["channels-last"].propose_on(CONV_CANDIDATE)
    v = cpu_evaluator.evaluate(task, Candidate.from_source(source))
    assert v.status == "ok", v.message


def test_proposers_apply_only_where_they_make_sense():
    conv, mlp = Task.from_source(CONV, name="conv"), Task.from_source(MLP, name="mlp")
    assert {p.name for p in resolve(None) if p.applies(mlp, "cpu")} == {"reference", "compile"}
    assert {p.name for p in resolve(None) if p.applies(conv, "cpu")} == {"reference", "compile", "channels-last"}
    assert {p.name for p in resolve(None) if p.applies(conv, "cuda:0")} == set(PROPOSERS)


def test_the_reference_proposer_cannot_wrap_a_candidate():
    with pytest.raises(ValueError, match="only applies to the reference"):
        PROPOSERS["reference"].propose_on(CONV_CANDIDATE)


def test_unknown_proposers_are_refused_with_the_known_names():
    with pytest.raises(ValueError, match="known: reference, compile"):
        resolve(["reference", "turbo"])


@pytest.fixture(scope="module")
def gpu_ev(tmp_path_factory):
    with Evaluator(EvalConfig(device="cuda", cache_dir=str(tmp_path_factory.mktemp("cache")), **FAST)) as ev:
        yield ev


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda-graph", "compile-reduce-overhead", "compile", "cudnn-benchmark",
                                  "channels-last"])
def test_cuda_proposers_are_judged_correct_on_the_gpu(name, gpu_ev):
    task = Task.from_source(CONV if name in ("cudnn-benchmark", "channels-last") else MLP, name="t")
    v = gpu_ev.evaluate(task, Candidate.from_source(PROPOSERS[name].propose(task)))
    assert v.status == "ok", v.message + repr(v.flags)


@pytest.mark.gpu
def test_the_cuda_graph_wrapper_of_an_earlier_candidate_is_judged_correct(gpu_ev):
    task = Task.from_source(CONV, name="conv_relu")
    v = gpu_ev.evaluate(task, Candidate.from_source(PROPOSERS["cuda-graph"].propose_on(CONV_CANDIDATE)))
    assert v.status == "ok", v.message + repr(v.flags)
