"""The device's lock: shared by work that is not timed, exclusive for timing.

Timing, graph replay and re-measurement need the device to themselves. Correctness trials, a reference's probe
and a candidate's first call (its torch.compile or Triton compilation, mostly CPU work) do not: they only need
that nothing is timed meanwhile. `DeviceLock` lets any number of such holders share the device, and gives it to
one exclusive holder at a time; an exclusive request waits for the shared holders to finish and keeps new ones
out (timing is never starved). Holders from outside the GPU stage (probes, first calls) are at most `beside` at
once, so that the job in the GPU stage keeps most of the device's memory; a first call gives its hold back while
torch.compile compiles (`compilegate`) and takes it again before the compiled code runs.

On a device that is not shared (`sharing=False`, the CPU: its timing and everyone's compiles contend for the
same cores) every hold is exclusive.

A CUDA device has one lock in a process (`device_lock`), whichever evaluators (one per precision policy a scheduler
is asked for) or other untimed work (a red team's task audit) use it; each evaluator's GPU stage holds it through a
`Stage` of its own.

The lock keeps the evaluators' own work off the device while it is timed; a candidate's worker, prepared ahead and
waiting for its GPU stage, runs the candidate's code, which could start work of its own there (a thread it left
running). Such workers are `park`ed on the lock: while anyone holds it alone they are stopped (SIGSTOP), and they go
on when it is let go; a worker is `unpark`ed when its own GPU stage holds the device.
"""
from __future__ import annotations

import contextlib
import threading
import time


_LOCKS: dict[tuple[str, int], "DeviceLock"] = {}
_LOCKS_GUARD = threading.Lock()


def device_lock(device) -> "DeviceLock":
    """The lock of a `torch.device`: for a CUDA device (indexed, as `check_device` gives it), the one lock every holder
    in this process shares, so that nothing any of them runs is on the device while another times; for the CPU a lock
    of its own (several CPU evaluators are several devices, `LocalScheduler`)."""
    if device.type != "cuda":
        return DeviceLock(sharing=False)
    with _LOCKS_GUARD:
        return _LOCKS.setdefault((device.type, device.index or 0), DeviceLock(sharing=True))


class DeviceLock:
    def __init__(self, sharing: bool = True, beside: int = 2):
        self.sharing = sharing
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._beside = threading.BoundedSemaphore(beside)
        self._parked: set = set()  # prepared candidates' workers waiting for their GPU stages

    def stage(self) -> "Stage":
        """A GPU stage's hold on this device (one for each evaluator that judges on it)."""
        return Stage(self)

    @contextlib.contextmanager
    def exclusive(self):
        mode = self._acquire(False)
        try:
            yield
        finally:
            self._release(mode)

    def teardown(self) -> "Teardown":
        """A shared hold for the end of a worker a GPU stage has just killed, taken while that stage holds the device
        and kept until the worker is reaped (`Teardown.release`): work it queued on the device runs on until its
        process is gone, so nothing is timed before; untimed work may go on beside it."""
        with self._cond:
            self._readers += 1  # no wait: the stage taking it holds the device, shared or alone
        return Teardown(self)

    def park(self, worker) -> None:
        """A prepared candidate's worker (`sandbox.process.Worker`) waits for its GPU stage: stopped whenever the
        device is held alone until `unpark`, at once where it is held alone now."""
        with self._cond:
            self._parked.add(worker)
            if self._writer:
                worker.pause(True)

    def unpark(self, worker) -> None:
        """The worker's own GPU stage holds the device (or it is given up): it goes on, and is stopped no more."""
        with self._cond:
            if worker in self._parked:
                self._parked.discard(worker)
                worker.pause(False)

    # -- holders from outside the GPU stage --------------------------------------------------------------------
    @contextlib.contextmanager
    def beside(self):
        """Hold the device shared from outside the GPU stage (exclusive where the device is not shared). Yields the
        hold (`Beside`), which its holder may give back for a while (a first call compiling) and take again."""
        hold = Beside(self)
        hold.take()
        try:
            yield hold
        finally:
            hold.give_back()

    # -- the lock ------------------------------------------------------------------------------------------
    def _acquire(self, shared: bool) -> str:
        """Hold the device shared (where it is shared) or alone; the mode held."""
        with self._cond:
            if shared and self.sharing:
                while self._writer or self._writers_waiting:
                    self._cond.wait()
                self._readers += 1
                return "shared"
            self._take_alone()
            return "exclusive"

    def _take_alone(self) -> None:
        """With `_cond` held: wait until no one else holds the device (keeping new shared holders out), then hold it."""
        self._writers_waiting += 1
        try:
            while self._writer or self._readers:
                self._cond.wait()
        finally:
            self._writers_waiting -= 1
        self._writer = True
        for worker in self._parked:  # nothing but the holder's work runs on the device: all stopped, then waited for
            worker.pause(True, wait=False)
        for worker in self._parked:
            worker.wait_stopped(worker.STOP_WAIT_S)

    def _release(self, mode: str) -> None:
        with self._cond:
            if mode == "shared":
                self._readers -= 1
            else:
                self._writer = False
                for worker in self._parked:
                    worker.pause(False)
            self._cond.notify_all()


class Beside:
    """A hold on the device from outside the GPU stage (`DeviceLock.beside`): one of the `beside` places and a
    shared hold, given back and taken again as its holder needs the device."""

    def __init__(self, lock: DeviceLock):
        self._lock, self._mode = lock, None
        self.waited_s = 0.0  # the seconds its takes waited: for a place, or while the device was held alone

    def take(self) -> None:
        """Hold the device again (waits as `beside` does); nothing where it is held."""
        if self._mode is None:
            t = time.monotonic()
            self._lock._beside.acquire()
            try:
                self._mode = self._lock._acquire(True)
            except BaseException:
                self._lock._beside.release()
                raise
            finally:
                self.waited_s += time.monotonic() - t

    def give_back(self) -> None:
        """Let the device go, place and hold; nothing where it is not held."""
        if self._mode is not None:
            mode, self._mode = self._mode, None
            self._lock._release(mode)
            self._lock._beside.release()


class Teardown:
    """A killed worker's shared hold on the device (`DeviceLock.teardown`), released once, when it is reaped."""

    def __init__(self, lock: DeviceLock):
        self._lock, self._held = lock, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._lock._release("shared")


class Stage:
    """An evaluator's GPU stage on a device (`DeviceLock.stage`): its correctness trials hold the device shared (or
    alone), its timing alone; one job at a time (the Evaluator serialises its stages)."""

    def __init__(self, lock: DeviceLock):
        self._lock, self._mode = lock, None  # the hold: "shared", "exclusive" or None

    def hold(self, shared: bool) -> None:
        """Take the device for the GPU stage: shared (its correctness trials) or exclusive."""
        self._mode = self._lock._acquire(shared)

    def to_exclusive(self) -> None:
        """The GPU stage's hold made exclusive (before timing): waits for the shared holders beside it."""
        if self._mode == "exclusive":
            return
        with self._lock._cond:
            self._lock._readers -= 1
            self._lock._cond.notify_all()
            self._lock._take_alone()
        self._mode = "exclusive"

    @property
    def shared(self) -> bool:
        """Whether the GPU stage holds the device shared (others may be on it beside its work)."""
        return self._mode == "shared"

    def let_go(self) -> None:
        """Give up the GPU stage's hold, if any."""
        mode, self._mode = self._mode, None
        if mode is not None:
            self._lock._release(mode)
