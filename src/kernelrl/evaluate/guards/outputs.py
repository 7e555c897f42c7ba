"""Outputs as evidence: poison what a candidate returned once it has been read, and notice storage handed back twice.

A candidate that caches its outputs and returns the cached tensor again (result replay) then returns poison;
one that rewrites a reused buffer honestly still returns the right values.
"""
from __future__ import annotations


def poison_(outputs) -> None:
    """Overwrite returned tensors in place: NaN for floating point, the dtype's minimum for integers (after reading)."""
    import torch

    for t in outputs:
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        with torch.no_grad():
            if t.is_floating_point() or t.is_complex():
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.fill_(True)
            else:
                t.fill_(torch.iinfo(t.dtype).min)


def storage_ptrs(outputs) -> set[int]:
    """Data pointers of the storages behind `outputs`."""
    import torch

    return {t.untyped_storage().data_ptr() for t in outputs if isinstance(t, torch.Tensor) and t.numel() > 0}


def reused_storage(outputs, earlier: set[int]) -> list[int]:
    """Indices of outputs whose storage is one returned earlier (the caller must keep earlier outputs alive)."""
    import torch

    return [i for i, t in enumerate(outputs)
            if isinstance(t, torch.Tensor) and t.numel() > 0 and t.untyped_storage().data_ptr() in earlier]
