"""The device's lock: untimed work shares the device, timing has it alone, and timing is never starved."""
import threading
import time

import torch

from kernelrl.evaluate.gpulock import DeviceLock, device_lock

WAIT = 0.3  # seconds a blocked holder is given to show that it is blocked


def _start(fn) -> tuple[threading.Thread, threading.Event]:
    """Run `fn` in a thread; the event is set once `fn` has its hold."""
    got = threading.Event()
    t = threading.Thread(target=fn, args=(got,), daemon=True)
    t.start()
    return t, got


def _beside(lock: DeviceLock, release: threading.Event):
    def run(got):
        with lock.beside():
            got.set()
            release.wait(10)
    return run


def _timing(stage) -> tuple[threading.Thread, threading.Event]:
    """Make `stage`'s hold exclusive in a thread (its GPU stage asking for the device to time); the event is set once
    it has the device alone."""
    def run(got):
        stage.to_exclusive()
        got.set()
    return _start(run)


def test_holders_beside_the_gpu_stage_share_the_device_with_its_correctness():
    lock, release = DeviceLock(), threading.Event()
    stage = lock.stage()
    stage.hold(shared=True)
    t, got = _start(_beside(lock, release))
    assert got.wait(WAIT * 10)  # a probe runs while the GPU stage checks correctness
    release.set()
    t.join(10)
    stage.let_go()


def test_timing_waits_for_the_holders_beside_it_and_keeps_new_ones_out():
    lock, first_done = DeviceLock(beside=2), threading.Event()
    stage = lock.stage()
    stage.hold(shared=True)
    t1, got1 = _start(_beside(lock, first_done))
    assert got1.wait(10)
    tj, upgraded = _timing(stage)
    assert not upgraded.wait(WAIT)  # the holder beside it is still on the device
    second_done = threading.Event()
    t2, got2 = _start(_beside(lock, second_done))
    assert not got2.wait(WAIT)  # a new holder waits behind the timing that asked first
    first_done.set()
    assert upgraded.wait(10)
    assert not got2.is_set()  # nothing shares the device while it is timed
    stage.let_go()
    assert got2.wait(10)
    second_done.set()  # its hold given back here, not during a later test
    for t in (t1, tj, t2):
        t.join(10)


def test_at_most_two_holders_stand_beside_the_gpu_stage():
    lock, release = DeviceLock(beside=2), threading.Event()
    runs = [_start(_beside(lock, release)) for _ in range(3)]
    time.sleep(WAIT)
    assert sum(got.is_set() for _, got in runs) == 2
    release.set()
    for t, got in runs:
        assert got.wait(10)
        t.join(10)


def test_a_device_that_is_not_shared_gives_every_holder_the_device_alone():
    lock, release = DeviceLock(sharing=False), threading.Event()
    stage = lock.stage()
    stage.hold(shared=True)  # the CPU: its timing and everyone's compiles contend for the same cores
    t, got = _start(_beside(lock, release))
    assert not got.wait(WAIT)
    stage.to_exclusive()  # already alone
    stage.let_go()
    assert got.wait(10)
    release.set()
    t.join(10)


def test_the_exclusive_context_waits_for_shared_holders():
    lock, release = DeviceLock(), threading.Event()
    t, got = _start(_beside(lock, release))
    assert got.wait(10)
    entered = threading.Event()

    def timing():
        with lock.exclusive():
            entered.set()

    tt = threading.Thread(target=timing, daemon=True)
    tt.start()
    assert not entered.wait(WAIT)
    release.set()
    assert entered.wait(10)
    tt.join(10)
    t.join(10)


def test_a_cuda_device_has_one_lock_in_a_process_and_each_cpu_evaluator_its_own():
    # Evaluators of one GPU (one per precision policy) and a red team's audit share its lock; two CPU "devices"
    # judge side by side
    assert device_lock(torch.device("cuda", 0)) is device_lock(torch.device("cuda", 0))
    assert device_lock(torch.device("cuda", 0)) is not device_lock(torch.device("cuda", 1))
    assert device_lock(torch.device("cpu")) is not device_lock(torch.device("cpu"))
    assert not device_lock(torch.device("cpu")).sharing


def test_one_evaluators_timing_waits_for_another_evaluators_trials_on_the_same_device():
    # Two GPU stages on one lock (two policies' evaluators): each keeps its own hold, and timing is alone
    lock = DeviceLock()
    strict, kernelbench = lock.stage(), lock.stage()
    strict.hold(shared=True)
    kernelbench.hold(shared=True)  # trials of both at once
    t, timed = _timing(strict)
    assert not timed.wait(WAIT)  # the other evaluator's trials are still on the device
    kernelbench.let_go()
    assert timed.wait(10)
    t.join(10)
    t2, got = _start(_beside(lock, threading.Event()))
    assert not got.wait(WAIT)  # nothing beside the timing
    strict.let_go()
    assert got.wait(10)



def test_a_killed_workers_end_keeps_timing_off_the_device_but_not_the_next_trials():
    # A GPU stage kills its candidate's worker and lets go; the work that worker queued runs on until its process is
    # gone, so the next timing waits for the reaper, and the next job's untimed trials do not.
    lock = DeviceLock()
    stage = lock.stage()
    stage.hold(shared=False)  # timed, then the worker killed
    end = lock.teardown()
    stage.let_go()
    nxt = lock.stage()
    t, got = _start(lambda got: (nxt.hold(shared=True), got.set()))
    assert got.wait(10)  # the next job's trials beside the worker's end
    tj, timed = _timing(nxt)
    assert not timed.wait(WAIT)  # its timing waits until the worker is reaped
    end.release()
    end.release()  # once only
    assert timed.wait(10)
    nxt.let_go()
    with lock.exclusive():  # nothing left held
        pass


def _state(pid: int) -> str:
    """A process's state letter (`T`: stopped)."""
    from pathlib import Path

    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_parked_worker_is_stopped_while_the_device_is_held_alone_and_goes_on_after():
    """A prepared candidate's worker waits for its GPU stage running the candidate's code, which could start work of
    its own on the device: parked on the lock, it is stopped whenever the device is held alone (timing), at once
    where it is held alone when parked, and goes on when the hold ends or its own stage unparks it."""
    import subprocess
    import sys

    from kernelrl.sandbox.process import Worker

    class Waiting:  # a worker's process: a session of its own, as `Worker` starts one
        def __init__(self):
            self.proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.005)"],
                                         start_new_session=True)

        pause, wait_stopped, STOP_WAIT_S = Worker.pause, Worker.wait_stopped, Worker.STOP_WAIT_S

    def stopped(w, want: bool) -> bool:
        end = time.monotonic() + 5
        while (_state(w.proc.pid) == "T") != want and time.monotonic() < end:
            time.sleep(0.01)
        return (_state(w.proc.pid) == "T") == want

    lock, a, b = DeviceLock(sharing=True), Waiting(), Waiting()
    try:
        lock.park(a)
        with lock.beside():  # untimed work beside: the parked worker goes on
            assert stopped(a, False)
        stage = lock.stage()
        stage.hold(shared=True)
        assert stopped(a, False)
        stage.to_exclusive()  # timing
        assert _state(a.proc.pid) == "T"  # stopped before the hold is given: nothing of it runs while timed
        lock.park(b)  # prepared while the device is timed: stopped at once
        assert _state(b.proc.pid) == "T"
        stage.let_go()
        assert stopped(a, False) and stopped(b, False)
        with lock.exclusive():
            assert stopped(a, True) and stopped(b, True)
            lock.unpark(b)  # its own GPU stage (or it is given up): it goes on, and is stopped no more
            assert stopped(b, False)
        with lock.exclusive():
            assert stopped(a, True) and stopped(b, False)
        assert stopped(a, False)
    finally:
        for w in (a, b):
            w.proc.kill()
            w.proc.wait(10)
