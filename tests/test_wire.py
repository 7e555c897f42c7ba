"""The worker-to-parent message format: tensors inline or through the spill file, and malformed replies refused."""
import contextlib
import json
import os
import struct

import pytest
import torch

from kernelrl.evaluate.evaluator import HARNESS
from kernelrl.sandbox import devshare, process, wire
from kernelrl.sandbox.process import Worker

needs_memfd = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create (Linux)")


@pytest.fixture
def spill():
    fd = os.memfd_create("test-spill")
    yield fd
    os.close(fd)


def _tensors():
    return {"f32": torch.randn(3, 5), "bf16": torch.randn(4).to(torch.bfloat16), "mask": torch.rand(7) > 0.5,
            "c64": torch.randn(2, 2, dtype=torch.complex64), "scalar": torch.tensor(2.5, dtype=torch.float64),
            "empty": torch.empty(0, 3), "idx": torch.arange(6, dtype=torch.int64).reshape(2, 3)}


def _same(got: dict, sent: dict):
    assert set(got) == set(sent)
    for k, t in sent.items():
        assert got[k].dtype == t.dtype and got[k].shape == t.shape and torch.equal(got[k], t), k


def test_small_replies_travel_inline_even_with_a_spill_file(spill):
    sent = _tensors()
    header, got = wire.decode(wire.encode({"type": "x", "n": 1}, sent, spill), spill)
    assert header == {"type": "x", "n": 1}
    _same(got, sent)
    assert os.fstat(spill).st_size == 0


@needs_memfd
def test_large_tensors_go_through_the_spill_file_and_the_message_carries_only_the_header(spill):
    sent = {"big": torch.randn(1024, 1024), "half": torch.randn(512, 1024).half(), **_tensors()}
    message = wire.encode({"type": "trial"}, sent, spill)
    assert len(message) < 4096 < sum(t.numel() * t.element_size() for t in sent.values())
    _, got = wire.decode(message, spill)
    _same(got, sent)
    got["big"].zero_()  # the parent owns what it decoded: writable, and neither the sender's memory nor the file's
    assert sent["big"].abs().sum() > 0
    _same(wire.decode(message, spill)[1], sent)


@needs_memfd
def test_a_spilled_reply_without_the_file_or_with_a_shortened_file_is_malformed(spill):
    message = wire.encode({}, {"big": torch.randn(1 << 19)}, spill)
    with pytest.raises(wire.WireError, match="spill file"):
        wire.decode(message, None)
    os.ftruncate(spill, 1000)  # a worker that shrinks the file after replying
    with pytest.raises(wire.WireError, match="beyond the end of the spill file"):
        wire.decode(message, spill)


def test_a_tensor_entry_whose_bytes_do_not_fit_its_shape_is_malformed():
    head = json.dumps({"_tensors": [{"name": "x", "dtype": "float32", "shape": [4], "offset": 0, "nbytes": 8}]})
    message = struct.pack("<Q", len(head)) + head.encode() + bytes(16)
    with pytest.raises(wire.WireError, match="8 bytes for shape"):
        wire.decode(message)


@needs_memfd
def test_a_worker_returns_a_large_output_through_the_spill_file_and_its_memory_is_given_back(tmp_path, monkeypatch):
    task = ("import torch\nimport torch.nn as nn\n"
            "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
            "def get_inputs():\n    return [torch.randn(1024, 1024)]\n"
            "def get_init_inputs():\n    return []\n")
    init = {"role": "reference", "device": "cpu", "seed": 7, "task_source": task}
    with Worker(HARNESS, scratch_root=tmp_path, init=init) as w:
        header, outs = w.request({"op": "trial", "seed": 11, "full": True}, 120)
        assert header["type"] == "trial", header
        torch.manual_seed(11)
        assert torch.equal(outs["out0"], torch.randn(1024, 1024) * 2)
        assert os.fstat(w._spill).st_size == 4 << 20  # kept for the next reply: its pages are rewritten
        header, again = w.request({"op": "trial", "seed": 12, "full": True}, 120)
        torch.manual_seed(12)
        assert torch.equal(again["out0"], torch.randn(1024, 1024) * 2)  # the new reply, not the kept bytes
        with pytest.raises(PermissionError):  # sealed: a mapping of the file can never lose its pages
            os.ftruncate(w._spill, 0)
        monkeypatch.setattr(wire, "SPILL_KEEP", 1 << 20)
        w.request({"op": "trial", "seed": 13, "full": True}, 120)
        assert os.fstat(w._spill).st_blocks == 0  # beyond SPILL_KEEP: punched out once read
        _, last = w.request({"op": "trial", "seed": 14, "full": True}, 120)
        torch.manual_seed(14)
        assert torch.equal(last["out0"], torch.randn(1024, 1024) * 2)


@needs_memfd
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_tensors_are_staged_through_pinned_memory_and_can_land_on_the_device(spill):
    dev = torch.device("cuda:0")
    sent = {"big": torch.randn(3000, 1001, device=dev), "bf16": torch.randn(700, 1000, device=dev).bfloat16(),
            "mask": torch.rand(1 << 20, device=dev) > 0.5, "c64": torch.randn(300, 300, dtype=torch.complex64,
                                                                              device=dev),
            "strided": torch.randn(1000, 2000, device=dev).t()}
    message = wire.encode({}, sent, spill)
    for onto in (dev, None):
        _, got = wire.decode(message, spill, onto)
        for k, t in sent.items():
            assert got[k].device.type == ("cuda" if onto is not None else "cpu"), k
            assert got[k].dtype == t.dtype and got[k].shape == t.shape and torch.equal(got[k].cpu(), t.cpu()), k


@needs_memfd
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_tensors_move_by_dma_through_the_sealed_file_page_locked_on_both_sides():
    dev = torch.device("cuda:0")
    fd = wire.make_spill()
    sender, receiver = wire.Mapped(fd), wire.Mapped(fd)  # the worker's and the parent's mappings of one file
    try:
        for round_ in range(3):
            sent = {"big": torch.randn(3000, 1001, device=dev) + round_, "bf16": torch.randn(700, 1000, device=dev)
                    .bfloat16(), "host": torch.randn(1 << 18), "strided": torch.randn(1000, 2000, device=dev).t()}
            nbytes = sum(t.numel() * t.element_size() for t in sent.values())
            assert round_ or not sender.lock(nbytes)  # the file must hold the bytes first
            os.ftruncate(fd, max(nbytes, os.fstat(fd).st_size))
            assert sender.lock(nbytes) and receiver.lock(nbytes, dev) and receiver.view(nbytes + 1) is None
            message = wire.encode({}, sent, fd, sender)
            _, got = wire.decode(message, fd, dev, receiver)
            for k, t in sent.items():
                assert got[k].device == dev and got[k].dtype == t.dtype and got[k].shape == t.shape, k
                assert torch.equal(got[k].cpu(), t.cpu()), (round_, k)
            if round_ == 1:  # a large reply's memory given back: both sides lock the file afresh next time
                sender.drop()  # the worker's mapping goes once it has replied (`sandbox.worker`)
                wire.release(fd, receiver)
                assert os.fstat(fd).st_blocks == 0 and receiver.size == 0
    finally:
        sender.drop()
        receiver.drop()
        os.close(fd)


_TWICE = ("import torch\nimport torch.nn as nn\n"
          "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
          "def get_inputs():\n    return [torch.randn(1024, 1024)]\n"
          "def get_init_inputs():\n    return []\n")


@contextlib.contextmanager
def _locked_gpu_worker(tmp_path):
    """A reference worker of `_TWICE` on cuda:0 whose replies of 4 MB reach the device without staging."""
    init = {"role": "reference", "device": "cuda:0", "seed": 7, "task_source": _TWICE}
    with Worker(HARNESS, scratch_root=tmp_path, init=init) as w:
        try:
            assert w.page_lock(4 << 20, 120, "cuda:0") is True
        except process.WorkerError as e:
            pytest.fail(f"{e}: {e.stderr_tail}")
        yield w


def _count_views(monkeypatch, cls) -> list:
    """Record, for every reply read through a `cls` (wire.Mapped or devshare.Shared), whether it gave a view."""
    served = []
    monkeypatch.setattr(cls, "view", lambda m, size, view=cls.view: served.append(view(m, size) is not None)
                        or view(m, size))
    return served


@needs_memfd
def test_a_worker_sized_for_its_replies_ahead_says_whether_it_locked_them_and_keeps_serving(tmp_path):
    init = {"role": "reference", "device": "cpu", "seed": 7, "task_source": _TWICE}
    with Worker(HARNESS, scratch_root=tmp_path, init=init) as w:
        assert w.page_lock(100, 60, None) is False  # below wire.SPILL_AT: not worth it, nothing asked
        assert w.page_lock(4 << 20, 60, None) is False  # a worker without a GPU cannot lock; the file is sized
        assert os.fstat(w._spill).st_size == 4 << 20
        w.reserve(4 << 20)  # the CPU stage's part: the pages allocated ahead
        assert os.fstat(w._spill).st_blocks * 512 >= 4 << 20
        w.unlock(60)
        header, outs = w.request({"op": "trial", "seed": 11, "full": True}, 120)
        torch.manual_seed(11)
        assert header["type"] == "trial" and torch.equal(outs["out0"], torch.randn(1024, 1024) * 2)


@needs_memfd
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_worker_locked_for_its_replies_sends_them_onto_the_device_through_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(devshare, "ENABLED", False)  # the page-locked file, not lent device memory
    with _locked_gpu_worker(tmp_path) as w:
        served = _count_views(monkeypatch, wire.Mapped)
        first = {}
        for seed in (11, 12):
            header, outs = w.request({"op": "trial", "seed": seed, "full": True}, 120, "cuda")
            assert header["type"] == "trial" and outs["out0"].is_cuda
            _, plain = w.request({"op": "trial", "seed": seed, "full": True}, 120)  # read back on the host
            assert torch.equal(outs["out0"].cpu(), plain["out0"]) and plain["out0"].abs().sum() > 0
            first[seed] = plain["out0"]
        assert served == [True, True]  # the parent read both device replies through its locked mapping
        w.unlock(60)
        _, staged = w.request({"op": "trial", "seed": 11, "full": True}, 120, "cuda")
        # staged: the reply is not read through any mapping once unlocked
        assert w._mapped.size == 0 and len(served) == 2 and torch.equal(staged["out0"].cpu(), first[11])


@needs_memfd
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_confined_worker_sends_its_replies_through_device_memory_the_parent_lent_it(tmp_path, monkeypatch):
    with _locked_gpu_worker(tmp_path) as w:
        assert w.lent and w._mapped.size == 0  # lent memory, no page-locked file
        served = _count_views(monkeypatch, devshare.Shared)
        first = {}
        for seed in (11, 12):
            header, outs = w.request({"op": "trial", "seed": seed, "full": True}, 120, "cuda")
            assert header["type"] == "trial" and outs["out0"].is_cuda
            kept = outs["out0"].clone()
            w._shared._tensor.fill_(0)  # what the worker might write there later (not a read: not counted)
            assert torch.equal(outs["out0"], kept)  # does not reach the reply: it was copied out on arrival
            _, plain = w.request({"op": "trial", "seed": seed, "full": True}, 120)  # read onto the host
            assert not plain["out0"].is_cuda and plain["out0"].abs().sum() > 0
            assert torch.equal(kept.cpu(), plain["out0"])
            first[seed] = plain["out0"]
        assert not torch.equal(first[11], first[12])
        assert served == [True] * 4  # every large reply came through the lent memory, none through the file
        w.unlock(60)
        assert not w.lent
        _, staged = w.request({"op": "trial", "seed": 11, "full": True}, 120, "cuda")
        assert len(served) == 4 and torch.equal(staged["out0"].cpu(), first[11])


@needs_memfd
def test_a_worker_that_cannot_take_lent_memory_gets_the_spill_file(tmp_path, monkeypatch):
    """Where the parent cannot lend device memory (no driver here), `share` says so and nothing is sent."""
    init = {"role": "reference", "device": "cpu", "seed": 7, "task_source": _TWICE}
    monkeypatch.setattr(devshare.Shared, "create", classmethod(lambda cls, n, d=None: (_ for _ in ()).throw(
        devshare.ShareError("no driver"))))
    with Worker(HARNESS, scratch_root=tmp_path, init=init) as w:
        assert w.share(4 << 20, 60, "cuda:0") is False and not w.lent
        assert w.share(4 << 20, 60, None) is False  # not a GPU: never tried
        header, outs = w.request({"op": "trial", "seed": 11, "full": True}, 120)
        torch.manual_seed(11)
        assert header["type"] == "trial" and torch.equal(outs["out0"], torch.randn(1024, 1024) * 2)


class _Lent:
    """Stands in for the parent's side of lent memory on a machine without a GPU: a memory file's descriptor is
    what gets passed, which the worker cannot map as device memory."""
    dropped = 0

    def __init__(self, size):
        self.size = size

    @classmethod
    def create(cls, nbytes, device=None):
        return cls(nbytes), os.memfd_create("lent")

    def drop(self):
        type(self).dropped += 1


@needs_memfd
def test_a_worker_that_cannot_map_the_lent_memory_says_so_and_keeps_serving(tmp_path, monkeypatch):
    """The descriptor crosses the socket after the op; a worker that cannot map it answers `shared: false`, the
    parent gives its side back, and replies go on through the spill file."""
    init = {"role": "reference", "device": "cpu", "seed": 7, "task_source": _TWICE}
    monkeypatch.setattr(devshare, "Shared", _Lent)
    with Worker(HARNESS, scratch_root=tmp_path, init=init) as w:
        w._sized(4 << 20)
        assert w.share(4 << 20, 60, "cuda:0") is False and not w.lent and _Lent.dropped == 1
        assert "ShareError: no CUDA device in this process" in w.stderr_tail()  # the worker's own account
        header, outs = w.request({"op": "trial", "seed": 11, "full": True}, 120)
        torch.manual_seed(11)
        assert header["type"] == "trial" and torch.equal(outs["out0"], torch.randn(1024, 1024) * 2)
