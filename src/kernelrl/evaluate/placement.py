"""Where workers run: the CPU cores beside each GPU that timings use, and the cores builds use instead."""
from __future__ import annotations

import os
from pathlib import Path

import torch



def worker_cpus(device: torch.device, per_device: int = 2) -> list[int] | None:
    """CPU cores for a CUDA device's workers to time on: `per_device` cores beside the GPU (its NUMA node's, when
    the system says which), a different pair for each device index. The reference and candidate workers share
    them, so both timings carry launch overhead from the same cores; builds run before, on every core. None on
    CPU or where affinity is unavailable."""
    if device.type != "cuda" or not hasattr(os, "sched_getaffinity"):
        return None
    cpulist = ""
    try:
        p = torch.cuda.get_device_properties(device)
        pci = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        cpulist = Path(f"/sys/bus/pci/devices/{pci}/local_cpulist").read_text()
    except (AttributeError, OSError):
        pass
    return pick_cores(os.sched_getaffinity(0), cpulist, host_index(device), per_device)


def host_index(device: torch.device) -> int:
    """The GPU's ordinal on the host: `device.index` mapped through CUDA_VISIBLE_DEVICES (a Ray actor sees its one
    GPU as cuda:0), so evaluators of different GPUs time on different cores."""
    index = device.index or 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return int(visible[index]) if index < len(visible) and visible[index].isdigit() else index


def pick_cores(allowed, cpulist: str, index: int, per_device: int = 2) -> list[int] | None:
    """`per_device` of the `allowed` cores for device `index`, from the GPU's local `cpulist` ("0-15,32-47")
    where it names any allowed core; None when fewer than two devices' worth of cores are available."""
    try:
        listed = {c for part in cpulist.strip().split(",") if part
                  for c in range(int(part.partition("-")[0]), int(part.partition("-")[2] or part) + 1)}
    except ValueError:
        listed = set()
    local = sorted(c for c in allowed if c in listed) or sorted(allowed)
    if len(local) < 2 * per_device:
        return None  # too few cores to set any aside
    start = (index * per_device) % (len(local) - per_device + 1)
    return local[start:start + per_device]


def build_cpus(device: torch.device, per_device: int = 2) -> list[int] | None:
    """The cores workers start and build on: every allowed core but the timing cores of this host's GPUs, so a
    build beside a GPU stage never shares cores with a timing (`worker_cpus`). None on CPU, or where no cores are
    set aside."""
    if device.type != "cuda" or not hasattr(os, "sched_getaffinity"):
        return None
    timing = set()
    for i in range(torch.cuda.device_count()):
        timing |= set(worker_cpus(torch.device("cuda", i), per_device) or ())
    hidden = host_gpu_cpulists()
    if len(hidden) > torch.cuda.device_count():  # GPUs CUDA_VISIBLE_DEVICES hides (other Ray actors') time too
        timing |= timing_cores(os.sched_getaffinity(0), hidden, per_device)
    rest = sorted(set(os.sched_getaffinity(0)) - timing)
    return rest if timing and rest else None


def host_gpu_cpulists() -> list[str]:
    """The local cpulist of each of the host's NVIDIA GPUs in PCI order, the ones CUDA_VISIBLE_DEVICES hides
    included; [] where the driver does not list them."""
    try:
        buses = sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return []
    lists = []
    for bus in buses:
        try:
            lists.append(Path(f"/sys/bus/pci/devices/{bus.lower()}/local_cpulist").read_text())
        except OSError:
            lists.append("")
    return lists


def timing_cores(allowed, cpulists: list[str], per_device: int = 2) -> set[int]:
    """The cores `pick_cores` sets aside for timing on each GPU of the host, given their local `cpulists`."""
    return set().union(*(pick_cores(allowed, c, i, per_device) or () for i, c in enumerate(cpulists)))
