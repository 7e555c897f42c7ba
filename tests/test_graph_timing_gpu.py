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
