"""The worker-to-parent message format: a JSON header followed by raw tensor bytes.

Messages from an untrusted worker are never unpickled: the parent only parses JSON and copies bytes into
tensors of an allow-listed dtype, so a forged message can at worst be wrong data, never code.
"""
from __future__ import annotations

import json
import struct

import numpy as np

# dtype name -> (numpy dtype used to carry the bytes, torch dtype name)
_DTYPES = {
    "float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "uint16",
    "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
    "complex64": "complex64", "complex128": "complex128",
}
MAX_HEADER = 64 << 20


class WireError(ValueError):
    """A malformed message from a worker."""


def encode(header: dict, tensors: dict | None = None) -> bytes:
    """Pack a JSON-able header and named CPU tensors (torch or numpy) into one message."""
    blobs, meta, offset = [], [], 0
    for name, t in (tensors or {}).items():
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            raise WireError(f"cannot send tensor {name!r} of dtype {dtype}")
        arr = _to_numpy(t)
        raw = arr.tobytes()
        meta.append({"name": name, "dtype": dtype, "shape": list(arr.shape), "offset": offset, "nbytes": len(raw)})
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps({**header, "_tensors": meta}).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def decode(message: bytes):
    """Unpack a message into (header, {name: torch.Tensor}); raises WireError on anything malformed."""
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
    tensors = {}
    for m in header.pop("_tensors", []):
        try:
            dtype, shape, off, nb = m["dtype"], [int(s) for s in m["shape"]], int(m["offset"]), int(m["nbytes"])
        except (KeyError, TypeError, ValueError) as e:
            raise WireError(f"bad tensor entry: {e}") from e
        if dtype not in _DTYPES or off < 0 or off + nb > len(body) or any(s < 0 for s in shape):
            raise WireError(f"bad tensor entry {m.get('name')!r}")
        arr = np.frombuffer(body[off:off + nb], dtype=_DTYPES[dtype])
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise WireError(f"tensor {m.get('name')!r}: {arr.size} elements for shape {shape}")
        t = torch.from_numpy(arr.copy()).reshape(shape)
        if dtype == "bfloat16":
            t = t.view(torch.bfloat16)
        tensors[str(m.get("name"))] = t
    return header, tensors


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t)
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.uint16) if hasattr(torch, "uint16") else t.view(torch.int16)
    return t.numpy()
