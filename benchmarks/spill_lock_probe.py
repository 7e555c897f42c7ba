"""What page-locking a gigabyte spill file costs, and whether huge pages would cut it (one GPU, no evaluator).

Usage: python benchmarks/spill_lock_probe.py
Prints the kernel's transparent-huge-page settings, then for an 8 GiB memfd (the size of KernelBench's largest
outputs) allocated three ways (posix_fallocate; madvise(MADV_HUGEPAGE) then fallocate; madvise then one write
every 2 MiB) the allocation time, /proc/meminfo's huge-page counters, and for two mappings of the file in turn the
seconds of cudaHostRegister, of one device-to-host DMA into it and of cudaHostUnregister. Shared-memory files get
huge pages only where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows them.
"""
import os, mmap, time, fcntl, sys, torch
def rd(p):
    try: return open(p).read().strip()
    except OSError as e: return str(e)
for p in ["/sys/kernel/mm/transparent_hugepage/enabled","/sys/kernel/mm/transparent_hugepage/shmem_enabled","/sys/kernel/mm/transparent_hugepage/defrag"]:
    print(p, rd(p))
print(os.uname().release)
N = 8 << 30
def meminfo():
    d = {}
    for l in open("/proc/meminfo"):
        k, v = l.split(":"); d[k] = v.strip()
    return {k: d.get(k) for k in ("ShmemHugePages", "ShmemPmdMapped", "AnonHugePages", "Shmem")}
def reg(mm, n):
    host = torch.frombuffer(mm, dtype=torch.uint8)
    t = time.perf_counter(); e = int(torch.cuda.cudart().cudaHostRegister(host.data_ptr(), n, 0)); t1 = time.perf_counter() - t
    d = torch.empty(n, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
    t = time.perf_counter(); host.copy_(d, non_blocking=True); torch.cuda.synchronize(); dma = time.perf_counter() - t
    t = time.perf_counter(); torch.cuda.cudart().cudaHostUnregister(host.data_ptr()); t2 = time.perf_counter() - t
    del host, d; torch.cuda.empty_cache()
    return e, round(t1, 3), round(dma, 3), round(t2, 3)
torch.cuda.init(); torch.empty(1, device="cuda")
for mode in ["fallocate", "madvise_fallocate", "madvise_touch"]:
    fd = os.memfd_create("p", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, N)
    mm = mmap.mmap(fd, N, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    t = time.perf_counter()
    if mode != "fallocate":
        mm.madvise(mmap.MADV_HUGEPAGE)
    if mode == "madvise_touch":
        v = memoryview(mm); step = 2 << 20
        for off in range(0, N, step): v[off] = 0
        v.release()
    else:
        os.posix_fallocate(fd, 0, N)
    alloc = round(time.perf_counter() - t, 3)
    mi = meminfo()
    r1 = reg(mm, N)
    # a second mapping of the same file, as the other process would (same process here)
    mm2 = mmap.mmap(fd, N, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    if mode != "fallocate": mm2.madvise(mmap.MADV_HUGEPAGE)
    r2 = reg(mm2, N)
    print(mode, "alloc_s", alloc, mi, "register/dma/unregister first", r1, "second mapping", r2, flush=True)
    mm2.close(); mm.close(); os.close(fd)
