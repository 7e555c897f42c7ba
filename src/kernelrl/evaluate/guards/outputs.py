"""Outputs as evidence: notice storage a program hands back again, without writing into it.

A program may return a buffer it keeps and rewrites (its own CUDA graph's static output), or one it returned before
without rewriting it (a replayed result). Both are facts the verdict reports; which one it was, the values decide:
inputs are fresh on every call, so a replayed result is wrong wherever the output depends on the inputs. Nothing
here writes into a returned tensor: it may be the program's own state.
"""
from __future__ import annotations


class Returned:
    """The storages of the outputs a program returned last, held weakly: whether a new output's storage is one
    handed back before, without keeping anything alive."""

    def __init__(self):
        self._last: list = []

    def see(self, outs) -> list[int]:
        """Indices of `outs` whose storage the previous call returned and is still alive; remembers `outs`."""
        from torch.multiprocessing.reductions import StorageWeakRef

        live = [r for r in self._last if not r.expired()]
        refs = [StorageWeakRef(o.untyped_storage()) if o.numel() else None for o in outs]
        self._last = [r for r in refs if r is not None]
        return [i for i, r in enumerate(refs) if r is not None and r in live]
