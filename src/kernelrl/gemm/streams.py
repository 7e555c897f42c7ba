"""Device buffers kept per CUDA stream, and launchers whose prepared plans point into them.

Kernels of one stream run one after the other and may share a workspace; kernels of two streams may run at
the same time, so each stream gets its own (as torch gives cuBLAS a workspace per stream; two graphs captured
on one stream share theirs). A stream first seen during CUDA-graph capture takes a spare made ahead of time
(`reserve`, called when a launcher is made), so that nothing is allocated, or zeroed, inside a capture when
it can be avoided.
"""
from __future__ import annotations

import ctypes
import weakref
from typing import Callable

import torch

Buffers = tuple[torch.Tensor, ...]


class PerStream:
    """Buffers of at least the requested sizes (elements, one size per buffer), one set per (device, stream).

    `make(device, sizes)` creates a set; a set that is too small is replaced by one of at least both sizes
    (launchers that hold the old set keep it alive)."""

    def __init__(self, make: Callable[[int, tuple[int, ...]], Buffers]):
        self._make = make
        self._sets: dict[tuple[int, int], Buffers] = {}
        self._spare: dict[int, Buffers] = {}

    @staticmethod
    def _fits(bufs: Buffers | None, sizes: tuple[int, ...]) -> bool:
        return bufs is not None and all(b.numel() >= s for b, s in zip(bufs, sizes))

    def _new(self, device: int, sizes: tuple[int, ...], old: Buffers | None) -> Buffers:
        if old is not None:
            sizes = tuple(max(s, b.numel()) for s, b in zip(sizes, old))
        return self._make(device, sizes)

    def reserve(self, device: int, sizes: tuple[int, ...]) -> None:
        """Keep a spare set of at least these sizes for a stream first seen during graph capture."""
        spare = self._spare.get(device)
        if not self._fits(spare, sizes) and not torch.cuda.is_current_stream_capturing():
            self._spare[device] = self._new(device, sizes, spare)

    def get(self, stream: int, device: int, sizes: tuple[int, ...]) -> Buffers:
        """The set of `stream` (a raw cudaStream_t as an int) on `device`, made or grown if needed."""
        key = (device, stream)
        bufs = self._sets.get(key)
        if not self._fits(bufs, sizes):
            if torch.cuda.is_current_stream_capturing() and self._fits(self._spare.get(device), sizes):
                bufs = self._spare.pop(device)
            else:  # eager: made now; under capture without a spare: made by (and inside) the capture
                bufs = self._new(device, sizes, bufs)
            self._sets[key] = bufs
        return bufs

    def all_buffers(self) -> list[Buffers]:
        """Every set, in use or spare (for tests)."""
        return list(self._sets.values()) + list(self._spare.values())


# The workspace of cuBLASLt and CUTLASS launches: torch's cuBLASLt cap on Hopper (CUBLASLT_WORKSPACE_SIZE default,
# 32 MiB), so every baseline gets the same. Its contents need no initial value.
WORKSPACE_BYTES = 32 * 1024 * 1024
WORKSPACES = PerStream(lambda dev, sizes: (torch.empty(sizes[0], dtype=torch.uint8, device=f"cuda:{dev}"),))


def _free_plans(plans: dict, free_plan: Callable[[int], None]) -> None:
    for plan, _ in plans.values():
        free_plan(plan)


def plan_launcher(make_plan: Callable[[torch.Tensor], int], run_plan: Callable[..., int],
                  free_plan: Callable[[int], None], device: int, what: str):
    """A launcher (a, b, c) -> None over a native prepared call: `make_plan(workspace)` returns a plan handle
    that points into `workspace` (or raises), `run_plan(plan, a_ptr, b_ptr, c_ptr, stream)` launches it and
    returns a status (0 ok), `free_plan(plan)` releases it once the launcher is gone. Each stream gets its own plan over its own workspace; the first plan is made
    now, so a problem the configuration cannot run fails here rather than at the first call."""
    raw_stream = torch._C._cuda_getCurrentRawStream
    WORKSPACES.reserve(device, (WORKSPACE_BYTES,))
    plans: dict[int, tuple[int, torch.Tensor]] = {}

    def plan_for(stream: int) -> tuple[int, torch.Tensor]:
        ws = WORKSPACES.get(stream, device, (WORKSPACE_BYTES,))[0]
        plans[stream] = entry = (make_plan(ws), ws)  # the plan points into ws: keep both together
        return entry

    plan_for(raw_stream(device))

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        stream = raw_stream(device)
        entry = plans.get(stream) or plan_for(stream)
        st = run_plan(entry[0], a.data_ptr(), b.data_ptr(), c.data_ptr(), stream)
        if st:
            raise RuntimeError(f"{what} failed with status {st}")

    launch.plans = plans  # stream -> (plan, its workspace)
    if isinstance(run_plan, ctypes._CFuncPtr):  # how the dispatch's C++ hot path calls a native run_plan itself
        launch.native = ("plan", ctypes.cast(run_plan, ctypes.c_void_p).value, plans, (), what)
    weakref.finalize(launch, _free_plans, plans, free_plan)
    return launch
