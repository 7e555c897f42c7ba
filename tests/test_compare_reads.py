"""A comparison and the first trial's summaries read their results back from the device once, not once a chunk."""
import pytest
import torch

from kernelrl.evaluate import compare as cmp
from kernelrl.evaluate.trials import _fingerprint, _summary

READS = ("__bool__", "__float__", "__int__", "item", "tolist")


@pytest.fixture
def reads(monkeypatch):
    """Every read of a tensor's values into Python, by name."""
    seen = []
    for name in READS:
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _method=method, **kw):
            seen.append(_name)
            return _method(self, *args, **kw)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return seen


def test_a_comparison_of_many_chunks_reads_its_statistics_once_and_judges_as_before(reads):
    e = torch.randn(4 * cmp.SERIAL + 7, dtype=torch.float64).float()  # five chunks on the host
    near, far = e * (1 + 1e-6), e.clone()
    far[3] += 1.0
    assert cmp.compare(near, e).ok and len(reads) == 1
    reads.clear()
    m = cmp.compare(far, e)
    assert not m.ok and m.mismatched == 1 and len(reads) == 1
    reads.clear()
    far[5] = float("nan")  # a NaN: the comparison reads more to say where
    assert "NaN/Inf" in cmp.compare(far, e).reason and len(reads) > 1


def test_the_first_trials_scales_constants_and_fingerprints_read_once_each(reads):
    ref = {"out0": torch.randn(100), "out1": torch.arange(5)}
    cand = {"out0": torch.full((100,), 2.0), "out1": torch.arange(5)}
    summary = _summary(ref, cand)
    assert len(reads) == 1 and summary["degenerate"] == ["out0"]
    assert summary["scales"]["0"] == pytest.approx(float(ref["out0"].double().pow(2).mean().sqrt()))
    reads.clear()
    prints = _fingerprint(ref)
    assert len(reads) == 2  # floats once, integers once (kept exact)
    assert prints[1] == ("out1", 10) and prints[0][1] == pytest.approx(float(ref["out0"].double().sum()))
