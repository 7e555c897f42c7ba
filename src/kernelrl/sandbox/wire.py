"""The worker-to-parent message format: a JSON header followed by raw tensor bytes.

Messages from an untrusted worker are never unpickled: the parent only parses JSON and copies bytes into
tensors of an allow-listed dtype, so a forged message can at worst be wrong data, never code.

Large tensors (KernelBench outputs reach gigabytes) skip the socket: with a `spill` file (a memfd the parent made
and the worker inherited) the worker writes their bytes there and the message carries only the header. The
parent reads them back into tensors it owns, so a worker that changes the file while it is read can at worst make
its own reply wrong (or short: a `WireError`), never crash the parent. Between a GPU and the file, bytes move by
DMA where both sides have mapped the file and page-locked the mapping with CUDA (`Mapped`), so a gigabyte output
crosses no other host memory; where the parent has lent the worker device memory instead (`devshare.Shared`,
which `encode` and `decode` take in `Mapped`'s place), the bytes never leave the GPU. The parent seals the file
against shrinking (`make_spill`), so its mapping can never lose pages under it; it gives a large file's memory
back by punching it out (`release`) instead.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import os
import struct
import threading

import numpy as np

# dtype name -> (numpy dtype used to carry the bytes, torch dtype name)
_DTYPES = {
    "float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "uint16",
    "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
    "complex64": "complex64", "complex128": "complex128",
}
MAX_HEADER = 64 << 20
SPILL_AT = 1 << 20  # replies whose tensors hold at least this many bytes go through the spill file
# A spill file keeps its pages (and both sides their page-locked mappings) up to this size between replies: a
# worker's next reply of a like size (every trial of a job, every job of a kept reference worker) rewrites them
# instead of faulting in and locking fresh pages. Larger files are punched out once read.
SPILL_KEEP = 8 << 30


class WireError(ValueError):
    """A malformed message from a worker."""


def encode(header: dict, tensors: dict | None = None, spill: int | None = None,
           mapped: Mapped | None = None) -> bytes:
    """Pack a JSON-able header and named tensors (torch on any device, or numpy) into one message; with `spill` (a
    file descriptor), tensors of `SPILL_AT` bytes or more in all are written to that file instead of the message,
    device tensors by DMA into `mapped` (the file's page-locked mapping) where it is locked and large enough, else
    through a pinned staging buffer (no pageable copy of a gigabyte output)."""
    import torch

    sources, meta, offset = [], [], 0
    for name, t in (tensors or {}).items():
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            raise WireError(f"cannot send tensor {name!r} of dtype {dtype}")
        if _on_device(t):
            src = _device_bytes(t)
            nbytes = src.numel()
        else:
            src = _to_numpy(t).reshape(-1).view(np.uint8)
            nbytes = src.size
        meta.append({"name": name, "dtype": dtype, "shape": list(t.shape), "offset": offset, "nbytes": nbytes})
        sources.append(src)
        offset += nbytes
    spilled = spill is not None and offset >= SPILL_AT
    host = mapped.view(offset) if spilled and mapped is not None else None
    blobs = []
    at = 0
    for src in sources:
        if not spilled:
            blobs.append((src.cpu().numpy() if not isinstance(src, np.ndarray) else src).data)
        elif host is not None:  # the page-locked file (DMA; returns once the bytes are there), or lent device memory
            src = torch.from_numpy(src) if isinstance(src, np.ndarray) else src
            host[at:at + src.numel()].copy_(src)
            at += src.numel()
        elif isinstance(src, np.ndarray):
            _pwrite_all(spill, memoryview(src), at)
            at += src.size
        else:
            stage = _staging()
            for i in range(0, src.numel(), STAGE_BYTES):
                n = min(STAGE_BYTES, src.numel() - i)
                stage[:n].copy_(src[i:i + n])
                _pwrite_all(spill, memoryview(stage.numpy()[:n]), at + i)
            at += src.numel()
    if host is not None and host.is_cuda:
        torch.cuda.synchronize(host.device)  # device-to-device copies: the bytes are there before the reply is
    head = json.dumps({**header, "_tensors": meta, "_spilled": spilled}).encode()
    return b"".join([struct.pack("<Q", len(head)), head] + blobs)


def decode(message: bytes, spill: int | None = None, device=None, mapped: Mapped | None = None):
    """Unpack a message into (header, {name: torch.Tensor}); raises WireError on anything malformed. A message
    whose tensors were spilled is read from `spill`, the file the worker was given, straight onto `device` when
    it is a GPU (by DMA from `mapped`, the file's page-locked mapping, where it is locked and the file is sealed
    against shrinking; else through a pinned staging buffer), else into host memory."""
    import torch

    if len(message) < 8:
        raise WireError("message too short")
    (n,) = struct.unpack("<Q", message[:8])
    if n > MAX_HEADER or 8 + n > len(message):
        raise WireError("bad header length")
    try:
        header = json.loads(message[8:8 + n])
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise WireError("header is not an object")
    body = memoryview(message)[8 + n:]
    spilled = bool(header.pop("_spilled", False))
    if spilled and spill is None:
        raise WireError("the reply's tensors are in a spill file this worker was not given")
    entries, file_size = [], os.fstat(spill).st_size if spilled else 0
    for m in header.pop("_tensors", []):
        try:
            dtype, shape, off, nb = m["dtype"], [int(s) for s in m["shape"]], int(m["offset"]), int(m["nbytes"])
        except (KeyError, TypeError, ValueError) as e:
            raise WireError(f"bad tensor entry: {e}") from e
        if dtype not in _DTYPES or off < 0 or nb < 0 or (not spilled and off + nb > len(body)) \
                or any(s < 0 for s in shape):
            raise WireError(f"bad tensor entry {m.get('name')!r}")
        item = np.dtype(_DTYPES[dtype]).itemsize
        if nb != item * int(np.prod(shape, dtype=np.int64)):
            raise WireError(f"tensor {m.get('name')!r}: {nb} bytes for shape {shape} of {dtype}")
        if spilled and off + nb > file_size:
            raise WireError(f"tensor {m.get('name')!r} lies beyond the end of the spill file")
        entries.append((str(m.get("name")), dtype, shape, off, nb))
    onto = torch.device(device) if device is not None else None
    to_gpu = spilled and onto is not None and onto.type == "cuda"
    host = None
    if spilled and mapped is not None and mapped.size and (to_gpu or mapped.on_device):
        host = mapped.view(max((off + nb for *_, off, nb in entries), default=0))
        if host is not None and not host.is_cuda and not _sealed(spill):
            host = None  # a locked file is read only onto a GPU, and only sealed (it cannot shrink below it)
    tensors = {}
    for name, dtype, shape, off, nb in entries:
        if host is not None:  # DMA from the locked file, or a copy out of the device memory lent to the worker
            t = host[off:off + nb].to(onto if to_gpu else "cpu", copy=True)
            t = t.view(getattr(torch, dtype)).reshape(shape)
        elif to_gpu:
            t = _read_spilled_onto(spill, off, nb, name, onto)
            t = t.view(getattr(torch, dtype)).reshape(shape)
        else:
            if spilled:
                arr = _read_spilled(spill, off, nb, name).view(_DTYPES[dtype])
            else:
                arr = np.frombuffer(body[off:off + nb], dtype=_DTYPES[dtype]).copy()
            t = torch.from_numpy(arr).reshape(shape)
            if dtype == "bfloat16":
                t = t.view(torch.bfloat16)
        tensors[name] = t
    if host is not None and host.is_cuda:
        torch.cuda.synchronize(host.device)  # copied out before the worker may write its next reply there
    return header, tensors


def make_spill() -> int | None:
    """A new spill file (a memfd, not inherited across exec unless passed), sealed against shrinking so that a
    mapping of it never loses pages; None where the OS has no memfd."""
    if not hasattr(os, "memfd_create"):
        return None
    fd = os.memfd_create("kernelrl-reply", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def _sealed(fd: int) -> bool:
    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK)
    except (OSError, AttributeError):  # not a memfd, or not Linux
        return False


_FALLOC_PUNCH = 0x03  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _punch(fd: int, size: int) -> bool:
    """Free the file's pages in [0, size) without changing its size (Linux `fallocate`); False where it cannot."""
    fallocate = getattr(ctypes.CDLL(None, use_errno=True), "fallocate", None)
    if fallocate is None:
        return False
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)
    return fallocate(fd, _FALLOC_PUNCH, 0, size) == 0


def release(fd: int, mapped: Mapped | None = None) -> None:
    """Give the spill file's memory back once its reply is read: this side's mapping is dropped and the pages
    punched out (a sealed file keeps its size; it reads as zeros until written again)."""
    if mapped is not None:
        mapped.drop()
    size = -(-os.fstat(fd).st_size // mmap.PAGESIZE) * mmap.PAGESIZE  # the last, partial page too
    if size and not _punch(fd, size):
        os.ftruncate(fd, 0)  # a file without the seal (or a file system without hole punching)


class Mapped:
    """A spill file mapped into this process and page-locked with CUDA (`cudaHostRegister`), so that device tensors
    move between it and a GPU by DMA. Locked only when asked (`lock`) and kept until `drop`: the evaluator holds
    locks only around its full-comparison trials (`Evaluator._lock_spills` says why). `view` gives None (the
    caller stages) when nothing is locked."""

    on_device = False  # host memory: read through only onto a GPU (`decode`); `devshare.Shared` is device memory

    def __init__(self, fd: int):
        self.fd, self.size = fd, 0
        self._mm, self._host = None, None

    def lock(self, size: int, device=None) -> bool:
        """Map and page-lock the file's first `size` bytes for the current (or the given) CUDA device."""
        import torch

        if self._host is not None and size <= self.size:
            return True
        self.drop()
        if size <= 0 or not torch.cuda.is_available() or os.fstat(self.fd).st_size < size:
            return False
        try:
            mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError):
            return False
        host = torch.frombuffer(mm, dtype=torch.uint8)
        with torch.cuda.device(device if device is not None else torch.cuda.current_device()):
            err = int(torch.cuda.cudart().cudaHostRegister(host.data_ptr(), size, 0))
        if err != 0:  # e.g. a system that cannot lock this much: replies are staged through pinned memory
            del host
            mm.close()
            return False
        self._mm, self._host, self.size = mm, host, size
        return True

    def view(self, size: int):
        """The locked mapping's first `size` bytes as a uint8 tensor, or None if fewer are locked."""
        return self._host[:size] if self._host is not None and size <= self.size else None

    def drop(self) -> None:
        """Unlock and unmap (a no-op if nothing is locked)."""
        if self._host is None:
            return
        import torch

        torch.cuda.cudart().cudaHostUnregister(self._host.data_ptr())
        self._host, self.size = None, 0
        try:
            self._mm.close()
        except BufferError:  # a view of it still lives; the mapping goes with it
            pass
        self._mm = None


STAGE_BYTES = 64 << 20  # the pinned host buffer device tensors are staged through
_stage = threading.local()  # one buffer per thread: the evaluator reads two workers' replies at once


def _staging():
    """This thread's pinned staging buffer (made on first use)."""
    import torch

    if getattr(_stage, "buffer", None) is None:
        _stage.buffer = torch.empty(STAGE_BYTES, dtype=torch.uint8, pin_memory=True)
    return _stage.buffer


def _on_device(t) -> bool:
    return not isinstance(t, np.ndarray) and t.device.type != "cpu"


def _device_bytes(t):
    """A device tensor's bytes as a flat uint8 tensor on its device (a copy only where it is not contiguous)."""
    import torch

    t = t.detach().contiguous().reshape(-1)
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)
    return t.view(torch.uint8)


def _pwrite_all(fd: int, view: memoryview, at: int) -> None:
    while view.nbytes:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


def _preadv_all(fd: int, view: memoryview, at: int, name) -> None:
    """Fill `view` from the spill file at `at`; WireError where the file ends first."""
    while view.nbytes:
        got = os.preadv(fd, [view], at)
        if got <= 0:
            raise WireError(f"tensor {name!r}: the spill file ended while it was read")
        view, at = view[got:], at + got


def _read_spilled_onto(fd: int, offset: int, nbytes: int, name, device):
    """`nbytes` bytes of the spill file from `offset`, in a new uint8 tensor on `device`, through pinned memory."""
    import torch

    out = torch.empty(nbytes, dtype=torch.uint8, device=device)
    stage = _staging()
    for i in range(0, nbytes, STAGE_BYTES):
        n = min(STAGE_BYTES, nbytes - i)
        _preadv_all(fd, memoryview(stage.numpy()[:n]), offset + i, name)
        out[i:i + n].copy_(stage[:n])
    return out


def _read_spilled(fd: int, offset: int, nbytes: int, name) -> np.ndarray:
    """`nbytes` bytes of the spill file from `offset`, in a new array; WireError if the file is shorter."""
    arr = np.empty(nbytes, dtype=np.uint8)
    _preadv_all(fd, memoryview(arr), offset, name)
    return arr


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t)
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.uint16) if hasattr(torch, "uint16") else t.view(torch.int16)
    return t.numpy()
