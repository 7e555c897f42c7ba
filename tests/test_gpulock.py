"""The device's lock: untimed work shares the device, timing has it alone, and timing is never starved."""
import threading
import time

from kernelrl.evaluate.gpulock import DeviceLock

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


def test_holders_beside_the_gpu_stage_share_the_device_with_its_correctness():
    lock, release = DeviceLock(), threading.Event()
    lock.hold(shared=True)
    t, got = _start(_beside(lock, release))
    assert got.wait(WAIT * 10)  # a probe runs while the GPU stage checks correctness
    release.set()
    t.join(10)
    lock.let_go()


def test_timing_waits_for_the_holders_beside_it_and_keeps_new_ones_out():
    lock, first_done = DeviceLock(beside=2), threading.Event()
    lock.hold(shared=True)
    t1, got1 = _start(_beside(lock, first_done))
    assert got1.wait(10)
    upgraded = threading.Event()

    def judge():
        lock.to_exclusive()
        upgraded.set()

    tj = threading.Thread(target=judge, daemon=True)
    tj.start()
    assert not upgraded.wait(WAIT)  # the holder beside it is still on the device
    t2, got2 = _start(_beside(lock, threading.Event()))
    assert not got2.wait(WAIT)  # a new holder waits behind the timing that asked first
    first_done.set()
    assert upgraded.wait(10)
    assert not got2.is_set()  # nothing shares the device while it is timed
    lock.let_go()
    assert got2.wait(10)


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
    lock.hold(shared=True)  # the CPU: its timing and everyone's compiles contend for the same cores
    t, got = _start(_beside(lock, release))
    assert not got.wait(WAIT)
    lock.to_exclusive()  # already alone
    lock.let_go()
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
