"""A physical floor on a call's time: no program moves its bytes or does its flops faster than the machine can.

Flops and bytes are counted on the *reference* (FlopCounterMode in the reference worker); peaks are measured
on this machine (CPU) or taken from the device's datasheet (CUDA). A candidate timed under the floor did not
do the work inside the timed region, whatever its code looks like.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

# Peak dense throughput by device name (flop/s, fp32 without TF32 and fp16/bf16 tensor cores) and bandwidth (B/s).
_CUDA_PEAKS = {"H200": (67e12, 990e12, 4.8e12), "H100": (67e12, 990e12, 3.35e12), "A100": (19.5e12, 312e12, 2.04e12),
               "L40": (90e12, 181e12, 0.864e12), "B200": (80e12, 2250e12, 8.0e12)}


@dataclass(frozen=True)
class Work:
    """What one call of a program must do: floating-point operations and bytes read plus written."""

    flops: int
    bytes: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Work":
        return cls(**d)


@dataclass(frozen=True)
class Peaks:
    """A machine's ceilings: flop/s for the task's dtype and memory bandwidth in bytes/s."""

    flops_per_s: float
    bytes_per_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def count_work(model, inputs) -> Work:
    """Flops (matmuls, convolutions, attention: FlopCounterMode) and tensor bytes in and out of one call."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else [out]
    nbytes = sum(t.numel() * t.element_size() for t in list(inputs) + list(outs) if isinstance(t, torch.Tensor))
    return Work(flops=int(counter.get_total_flops()), bytes=int(nbytes))


def cpu_peaks(seconds: float = 0.2) -> Peaks:
    """Measured CPU ceilings: best fp32 matmul flop/s and best large-copy bandwidth over ~`seconds` each."""
    import torch

    # One thread, scaled by the thread count: multi-threaded runs on a loaded machine under-measure badly.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        best_flops = 0.0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            torch.mm(a, b)
            best_flops = max(best_flops, 2 * 256 ** 3 / (time.perf_counter() - t0))
        src, dst = torch.empty(8 << 20), torch.empty(8 << 20)  # 32 MiB each: beyond most L2s
        best_bw = 0.0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            dst.copy_(src)
            best_bw = max(best_bw, 2 * src.numel() * 4 / (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(threads)
    return Peaks(best_flops * threads, best_bw * threads)


def cuda_peaks(device_name: str, low_precision: bool) -> Peaks | None:
    """Datasheet ceilings for a known GPU (None when the name is not known)."""
    for key, (fp32, fp16, bw) in _CUDA_PEAKS.items():
        if key in device_name:
            return Peaks(fp16 if low_precision else fp32, bw)
    return None


def floor_us(work: Work, peaks: Peaks, flops_headroom: float = 16.0, bytes_headroom: float = 8.0) -> float:
    """The shortest believable time of one call in microseconds (headroom covers caches and under-measured peaks)."""
    t_flops = work.flops / (peaks.flops_per_s * flops_headroom) if peaks.flops_per_s > 0 else 0.0
    t_bytes = work.bytes / (peaks.bytes_per_s * bytes_headroom) if peaks.bytes_per_s > 0 else 0.0
    return max(t_flops, t_bytes) * 1e6


def below_floor(time_us: float, work: Work, peaks: Peaks) -> str | None:
    """A message when `time_us` is physically impossible for `work` on `peaks`, else None."""
    floor = floor_us(work, peaks)
    if time_us >= floor:
        return None
    achieved = work.flops / (time_us * 1e-6) if time_us > 0 else float("inf")
    return (f"{time_us:.1f} µs per call is below the physical floor of {floor:.1f} µs "
            f"({work.flops:.3g} flop and {work.bytes:.3g} B; that would be {achieved:.3g} flop/s against a peak of "
            f"{peaks.flops_per_s:.3g})")
