"""The inputs a worker gives the programs: drawn on the device, and new for every timed call."""
import pytest
import torch

from kernelrl.evaluate.harness import Harness

RANDOM_TASK = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x, w, k):
        return x * w + k
def get_inputs():
    return [torch.randn(64, 32), torch.rand(32), 3]
def get_init_inputs():
    return []
"""

FIXED_VALUES_TASK = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.linspace(-1, 1, 4096)]
def get_init_inputs():
    return []
"""


def _harness(tmp_path, source, role="reference", fixed=()):
    return Harness({"role": role, "device": "cpu", "seed": 1, "task_source": source, "fixed_inputs": list(fixed)},
                   {}, str(tmp_path))


def test_every_timed_call_gets_a_new_draw_of_each_float_input_and_both_programs_get_the_same(tmp_path):
    ref, cand = _harness(tmp_path, RANDOM_TASK), _harness(tmp_path, RANDOM_TASK, role="candidate")
    base = ref.base_inputs(5)
    one, two = ref.fresh(base, 100), ref.fresh(base, 101)
    for a, b, x in zip(one[:2], two[:2], base[:2]):
        assert a.shape == x.shape and not torch.equal(a, x) and not torch.equal(a, b)
    assert not torch.equal(one[0].flatten().sort().values, base[0].flatten().sort().values)  # drawn, not reordered
    assert one[2] == 3  # not a tensor: as it was
    assert one[1].min() >= 0  # the task's own distribution (torch.rand), not a rescaling of another draw
    same = cand.fresh(cand.base_inputs(5), 100)
    assert all(torch.equal(a, b) for a, b in zip(one[:2], same[:2]))


def test_a_fixed_input_stays_as_the_task_drew_it(tmp_path):
    h = _harness(tmp_path, RANDOM_TASK, fixed=[1])
    base = h.base_inputs(5)
    xs = h.fresh(base, 100)
    assert torch.equal(xs[1], base[1]) and not torch.equal(xs[0], base[0])


def test_inputs_drawn_the_same_every_time_are_permuted_instead(tmp_path):
    h = _harness(tmp_path, FIXED_VALUES_TASK)
    base = h.base_inputs(5)
    xs = h.fresh(base, 100)
    assert not torch.equal(xs[0], base[0])  # a value-keyed cache cannot answer
    assert torch.equal(xs[0].sort().values, base[0].sort().values)  # the same values, reordered


def test_inputs_too_large_to_keep_are_drawn_again_for_each_round_with_the_same_values(tmp_path):
    h = _harness(tmp_path, RANDOM_TASK)
    assert h.base_inputs(5) is h.base_inputs(5)  # kept between rounds
    h._idle_bytes = 64 * 32 * 4  # less than the inputs' bytes: none kept while the other program is timed
    one, two = h.base_inputs(6), h.base_inputs(6)
    assert one is not two and h._base == (None, None)
    assert all(torch.equal(a, b) for a, b in zip(one[:2], two[:2])) and one[2] == two[2] == 3
    assert torch.equal(h.fresh(one, 100)[0], h.fresh(two, 100)[0])


def test_a_permutation_made_in_chunks_is_the_one_made_at_once(tmp_path, monkeypatch):
    from kernelrl.evaluate import harness

    h = _harness(tmp_path, FIXED_VALUES_TASK)
    base = h.base_inputs(5)
    whole = h.fresh(base, 100)[0]
    monkeypatch.setattr(harness, "PERMUTE_CHUNK", 1000)  # 4096 elements in 5 steps, the last one short
    chunked = h.fresh(base, 100)[0]
    assert torch.equal(chunked, whole) and not torch.equal(chunked, base[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_inputs_are_drawn_on_the_gpu(tmp_path):
    h = Harness({"role": "reference", "device": "cuda:0", "seed": 1, "task_source": RANDOM_TASK}, {}, str(tmp_path))
    xs = h.inputs(5)
    assert h.drawn_on_device and xs[0].is_cuda
    assert not torch.equal(h.fresh(xs, 9)[0], xs[0])
