"""Graph-replay timing measures the device: a host that falls behind between the two events adds nothing."""
import statistics
import time

import pytest
import torch

from kernelrl.evaluate import harness
from kernelrl.evaluate.harness import Harness

TINY_TASK = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(4096)]
def get_init_inputs():
    return []
"""


class _SlowHost(torch.cuda.Event if torch.cuda.is_available() else object):
    """An event whose recording leaves the host busy for 80 us afterwards, as a loaded machine can."""

    def record(self, *args, **kwargs):
        super().record(*args, **kwargs)
        t = time.perf_counter()
        while time.perf_counter() - t < 80e-6:
            pass


def _replay_us(tmp_path) -> float:
    h = Harness({"role": "reference", "device": "cuda:0", "seed": 1, "task_source": TINY_TASK, "fixed_inputs": []},
                {}, str(tmp_path))
    h._Event = _SlowHost
    reply, _ = h.op_graph({"seed": 3, "sample_seed": 4, "perm_seed": 5, "calls": 30})
    return statistics.median(reply["times_us"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_host_delayed_between_the_timing_events_adds_nothing_to_a_replays_device_time(tmp_path, monkeypatch):
    assert _replay_us(tmp_path) < 20  # one elementwise kernel on 4096 floats: a few microseconds
    monkeypatch.setattr(harness, "REPLAY_LEAD_CYCLES", 0)  # no lead: the L2 flush alone runs while the host spins
    assert _replay_us(tmp_path) > 30


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_jobs_graph_is_captured_once_for_its_rounds_where_it_fits_and_each_round_where_it_does_not(tmp_path):
    h = Harness({"role": "reference", "device": "cuda:0", "seed": 1, "task_source": TINY_TASK, "fixed_inputs": []},
                {}, str(tmp_path))
    captures = []
    capture = h._capture
    h._capture = lambda model, base: captures.append(1) or capture(model, base)

    def round_(seed, perm):
        reply, samples = h.op_graph({"seed": seed, "sample_seed": 4, "perm_seed": perm, "calls": 3, "warmup": 1})
        assert len(reply["times_us"]) == 3
        return samples

    first, again = round_(3, 5), round_(3, 6)
    assert len(captures) == 1  # the second round of the job replays the kept graph
    # ...on its own fresh inputs: each replay's outputs are twice the inputs drawn for that call
    base = h.base_inputs(3)
    for perm, samples in ((5, first), (6, again)):
        gen = torch.Generator().manual_seed(4)  # as `_sample` draws its positions, call after call
        for i in range(3):
            x = h.fresh(base, perm + i)[0].reshape(-1)
            idx = torch.randint(0, x.numel(), (harness.SAMPLES_PER_OUTPUT,), generator=gen)
            assert torch.equal(samples[f"c{i}o0"], (2 * x)[idx.to(x.device)].to("cpu", torch.float64))
    round_(7, 5)
    assert len(captures) == 2  # another job (seed): captured again
    h.op_rest({})
    assert h._graphs_held == {}
    h._idle_bytes = 0  # nothing may be kept between requests: every round captures
    round_(9, 5), round_(9, 6)
    assert len(captures) == 4 and h._graphs_held == {}
