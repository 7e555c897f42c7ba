"""A physical floor on a call's time: no program writes its outputs faster than the machine's memory allows.

The floor counts only work that every correct program must do: writing its outputs (`written_bytes`). Never the
reference's flops or the inputs it reads: a correct program may do less arithmetic than the reference
(`torch.diag(a) @ b` as `a[:, None] * b`) or read less of its inputs (only a diagonal). Bandwidth is measured on
this machine (CPU) or taken from the device's datasheet (CUDA). A candidate timed under the floor did not do the
work inside the timed region, whatever its code looks like.

The floor needs an upper bound on bandwidth, and a measurement is only a lower bound: on a loaded machine a copy
can run a hundred times slower than the memory allows. So the CPU figure is never below `CPU_BANDWIDTH_AT_LEAST`,
which no honest program's writes can beat by the floor's headroom; a slow measurement only makes the floor lower.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

# Memory bandwidth by device name (B/s, datasheet).
_CUDA_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.04e12, "L40": 0.864e12, "B200": 8.0e12}

# The least CPU bandwidth the floor assumes (B/s): a desktop's DRAM; caches and many cores are covered by the
# headroom and by the measurement, which scales with the thread count.
CPU_BANDWIDTH_AT_LEAST = 50e9


@dataclass(frozen=True)
class Peaks:
    """A machine's memory bandwidth in bytes/s."""

    bytes_per_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def written_bytes(outputs, inputs=()) -> int:
    """Bytes a call must have written to produce `outputs`: each storage once, none that an input owns, and at most
    its elements' bytes (an expanded view needs only its storage written)."""
    seen = {t.untyped_storage().data_ptr() for t in inputs}
    total = 0
    for o in outputs:
        ptr = o.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        total += min(o.numel() * o.element_size(), o.untyped_storage().nbytes())
    return total


def cpu_peaks(seconds: float = 0.2) -> Peaks:
    """CPU bandwidth: the best large copy over ~`seconds`, in bytes read plus written per second, and never below
    `CPU_BANDWIDTH_AT_LEAST` (a loaded machine under-measures, and an under-measured bandwidth refuses honest
    programs)."""
    import torch

    # One thread, scaled by the thread count: multi-threaded runs on a loaded machine under-measure badly.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src, dst = torch.empty(8 << 20), torch.empty(8 << 20)  # 32 MiB each: beyond most L2s
        best_bw = 0.0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            dst.copy_(src)
            best_bw = max(best_bw, 2 * src.numel() * 4 / (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(threads)
    return Peaks(max(best_bw * threads, CPU_BANDWIDTH_AT_LEAST))


def cuda_peaks(device_name: str) -> Peaks | None:
    """Datasheet bandwidth of a known GPU (None when the name is not known)."""
    for key, bw in _CUDA_BANDWIDTH.items():
        if key in device_name:
            return Peaks(bw)
    return None


def floor_us(nbytes: int, peaks: Peaks, headroom: float = 8.0) -> float:
    """The shortest believable time in microseconds to write `nbytes` (headroom covers caches that absorb writes
    and an under-measured bandwidth)."""
    return nbytes / (peaks.bytes_per_s * headroom) * 1e6 if peaks.bytes_per_s > 0 else 0.0


def below_floor(time_us: float, nbytes: int, peaks: Peaks) -> str | None:
    """A message when `time_us` is physically impossible for writing `nbytes` of outputs on `peaks`, else None."""
    floor = floor_us(nbytes, peaks)
    if time_us >= floor:
        return None
    achieved = nbytes / (time_us * 1e-6) if time_us > 0 else float("inf")
    return (f"{time_us:.1f} µs per call is below the physical floor of {floor:.1f} µs for writing its "
            f"{nbytes:.3g} B of outputs (that would be {achieved:.3g} B/s against a bandwidth of "
            f"{peaks.bytes_per_s:.3g} B/s)")
