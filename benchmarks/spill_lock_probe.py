"""What page-locking a gigabyte spill file costs, and whether huge pages would cut it (one GPU, no evaluator).

Usage: python benchmarks/spill_lock_probe.py
Prints the kernel's transparent-huge-page settings, then for an 8 GiB memfd (the size of KernelBench's largest
outputs) allocated three ways (posix_fallocate; madvise(MADV_HUGEPAGE) then fallocate; madvise then one write
every 2 MiB) the allocation time, /proc/meminfo's huge-page counters, and for two mappings of the file in turn the
seconds of cudaHostRegister, of one device-to-host DMA into it and of cudaHostUnregister. Shared-memory files get
huge pages only where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows them.
"""
from __future__ import annotations

import mmap
import os
import time

import torch

SIZE = 8 << 30
THP = "/sys/kernel/mm/transparent_hugepage"
MODES = ("fallocate", "madvise_fallocate", "madvise_touch")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return str(e)


def _huge_pages() -> dict:
    """/proc/meminfo's shared-memory and huge-page counters."""
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return {k: info[k].strip() for k in ("ShmemHugePages", "ShmemPmdMapped", "AnonHugePages", "Shmem") if k in info}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return round(time.perf_counter() - t, 3)


def register_dma_unregister(mm: mmap.mmap) -> tuple:
    """(cudaHostRegister's error code, its seconds, one device-to-host copy's seconds, cudaHostUnregister's).
    The mapping is registered here rather than through `wire.Mapped`, which maps the file itself: the huge-page
    advice is given to the mapping that is registered."""
    host = torch.frombuffer(mm, dtype=torch.uint8)
    cudart = torch.cuda.cudart()
    err = []
    reg = _timed(lambda: err.append(int(cudart.cudaHostRegister(host.data_ptr(), SIZE, 0))))
    dev = torch.empty(SIZE, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    dma = _timed(lambda: host.copy_(dev, non_blocking=True))
    unreg = _timed(lambda: cudart.cudaHostUnregister(host.data_ptr()))
    del host, dev
    torch.cuda.empty_cache()
    return err[0], reg, dma, unreg


def _mapping(fd: int, advise: bool) -> mmap.mmap:
    mm = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    if advise:
        mm.madvise(mmap.MADV_HUGEPAGE)
    return mm


def probe(mode: str) -> str:
    fd = os.memfd_create("probe", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, SIZE)
        advise = mode != "fallocate"
        t = time.perf_counter()
        first = _mapping(fd, advise)
        if mode == "madvise_touch":
            view = memoryview(first)
            for off in range(0, SIZE, 2 << 20):
                view[off] = 0
            view.release()
        else:
            os.posix_fallocate(fd, 0, SIZE)
        alloc = round(time.perf_counter() - t, 3)
        counters = _huge_pages()
        r1 = register_dma_unregister(first)
        second = _mapping(fd, advise)  # as the other process would map it (here in this one)
        r2 = register_dma_unregister(second)
        second.close()
        first.close()
    finally:
        os.close(fd)
    return f"{mode} alloc_s {alloc} {counters} register/dma/unregister first {r1} second mapping {r2}"


def main() -> None:
    for name in ("enabled", "shmem_enabled", "defrag"):
        print(f"{THP}/{name}", _read(f"{THP}/{name}"))
    print(os.uname().release)
    torch.empty(1, device="cuda")
    for mode in MODES:
        print(probe(mode), flush=True)


if __name__ == "__main__":
    main()
