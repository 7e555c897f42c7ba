"""The worker-to-parent message format: a JSON header followed by raw tensor bytes.

Messages from an untrusted worker are never unpickled: the parent only parses JSON and copies bytes into
tensors of an allow-listed dtype, so a forged message can at worst be wrong data, never code.

Large tensors (KernelBench outputs reach gigabytes) skip the socket: with a `spill` file (a memfd the parent made
and the worker inherited) the worker writes their bytes there and the message carries only the header. The
parent reads them back with `preadv` into tensors it owns, so a worker that changes or truncates the file while
it is read can at worst make its own reply wrong or short (a `WireError`), never crash the parent.
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np

# dtype name -> (numpy dtype used to carry the bytes, torch dtype name)
_DTYPES = {
    "float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "uint16",
    "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
    "complex64": "complex64", "complex128": "complex128",
}
MAX_HEADER = 64 << 20
SPILL_AT = 1 << 20  # replies whose tensors hold at least this many bytes go through the spill file


class WireError(ValueError):
    """A malformed message from a worker."""


def encode(header: dict, tensors: dict | None = None, spill: int | None = None) -> bytes:
    """Pack a JSON-able header and named CPU tensors (torch or numpy) into one message; with `spill` (a file
    descriptor), tensors of `SPILL_AT` bytes or more in all are written to that file instead of the message."""
    arrays, meta, offset = [], [], 0
    for name, t in (tensors or {}).items():
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            raise WireError(f"cannot send tensor {name!r} of dtype {dtype}")
        arr = _to_numpy(t).reshape(-1).view(np.uint8)  # the bytes, without a copy
        meta.append({"name": name, "dtype": dtype, "shape": list(t.shape), "offset": offset, "nbytes": arr.size})
        arrays.append(arr)
        offset += arr.size
    spilled = spill is not None and offset >= SPILL_AT
    if spilled:
        at = 0
        for arr in arrays:
            view = memoryview(arr)
            while view.nbytes:
                n = os.pwrite(spill, view, at)
                view, at = view[n:], at + n
    head = json.dumps({**header, "_tensors": meta, "_spilled": spilled}).encode()
    return b"".join([struct.pack("<Q", len(head)), head] + ([] if spilled else [a.data for a in arrays]))


def decode(message: bytes, spill: int | None = None):
    """Unpack a message into (header, {name: torch.Tensor}); raises WireError on anything malformed. A message
    whose tensors were spilled is read from `spill`, the file the worker was given."""
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
    tensors = {}
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
        if spilled:
            arr = _read_spilled(spill, off, nb, m.get("name")).view(_DTYPES[dtype])
        else:
            arr = np.frombuffer(body[off:off + nb], dtype=_DTYPES[dtype]).copy()
        t = torch.from_numpy(arr).reshape(shape)
        if dtype == "bfloat16":
            t = t.view(torch.bfloat16)
        tensors[str(m.get("name"))] = t
    return header, tensors


def _read_spilled(fd: int, offset: int, nbytes: int, name) -> np.ndarray:
    """`nbytes` bytes of the spill file from `offset`, in a new array; WireError if the file is shorter."""
    if offset + nbytes > os.fstat(fd).st_size:
        raise WireError(f"tensor {name!r} lies beyond the end of the spill file")
    arr = np.empty(nbytes, dtype=np.uint8)
    view, at = memoryview(arr), offset
    while view.nbytes:
        n = os.preadv(fd, [view], at)
        if n <= 0:
            raise WireError(f"tensor {name!r}: the spill file ended while it was read")
        view, at = view[n:], at + n
    return arr


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t)
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.uint16) if hasattr(torch, "uint16") else t.view(torch.int16)
    return t.numpy()
