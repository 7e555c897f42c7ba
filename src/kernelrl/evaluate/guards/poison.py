"""Poisoned allocations: make uninitialised memory hold garbage instead of luckily-right values.

CPU: glibc's M_PERTURB fills every malloc'd block (fresh mmap'd ones too) with a byte pattern; 0x7F bytes read as
3.4e38 in float32, NaN in float16 and a huge integer. CUDA: fill the caching allocator's free blocks with NaN,
so a candidate's torch.empty never finds a freed reference result.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_PERTURB = -6


def malloc_perturb(fill_byte: int = 0x7F) -> bool:
    """Make glibc fill new allocations with `fill_byte` (0 turns it off); False where glibc is not in use."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # glibc stores the perturb byte and writes its complement into fresh allocations.
    return bool(mallopt(_M_PERTURB, (fill_byte ^ 0xFF) if fill_byte else 0))


def poison_cuda_cache(device, nbytes: int = 1 << 30) -> int:
    """Fill up to `nbytes` of the CUDA caching allocator's free memory with NaN; returns bytes poisoned."""
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    reserved_free = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    n = min(nbytes, reserved_free + free // 4)
    if n <= 0:
        return 0
    block = torch.empty(n // 4, dtype=torch.float32, device=device)
    block.fill_(float("nan"))
    del block  # back to the cache, NaN-filled, for the next torch.empty to find
    return n
