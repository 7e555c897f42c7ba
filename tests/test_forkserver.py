"""Workers forked by the fork server: the same worker a fresh interpreter would be, its exit status seen by the
parent, none of the server's descriptors inherited, and a server that ends replaced by the next spawn."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from kernelrl.evaluate.evaluator import HARNESS
from kernelrl.sandbox import forkserver
from kernelrl.sandbox.process import Worker, WorkerError
from procs import running

INIT = {"role": "candidate", "device": "cpu"}

pytestmark = pytest.mark.skipif(not forkserver.ENABLED, reason="the fork server is turned off here")


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def sockets_of(pid: int) -> int:
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return sum(link.startswith("socket:") for link in links)


def test_a_worker_is_forked_by_the_server_and_answers_as_a_fresh_one_would(tmp_path):
    with Worker(HARNESS, scratch_root=tmp_path, init=INIT) as w:
        assert isinstance(w.proc, forkserver.Forked)
        assert parent_of(w.proc.pid) == forkserver._server.proc.pid
        assert os.getsid(w.proc.pid) == w.proc.pid  # a session of its own, killed as one
        assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"
        assert sockets_of(w.proc.pid) == 1  # its own connection: never the fork server's


def test_the_parent_sees_a_workers_exit_status(tmp_path):
    with Worker(HARNESS, scratch_root=tmp_path, init=INIT) as w:
        assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"
        w.send({"op": "exit"})
        assert w.proc.wait(timeout=30) == 0 and not w.alive
    with Worker(HARNESS, scratch_root=tmp_path, init=INIT) as w:
        assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"
        os.kill(w.proc.pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match="killed by SIGKILL"):
            w.request({"op": "ready"}, 30)
        with pytest.raises(subprocess.TimeoutExpired):
            forkserver.Forked(2 ** 22 + 1, forkserver._server).wait(timeout=0.2)  # a pid it never forked


def test_workers_end_with_their_server_and_the_next_spawn_starts_another(tmp_path):
    w = Worker(HARNESS, scratch_root=tmp_path, init=INIT)
    old = forkserver._server
    try:
        assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"
        old.proc.kill()
        old.proc.wait(timeout=30)
        assert w.proc.wait(timeout=30) is not None  # its worker saw its parent go and ended
    finally:
        w.close()
        old.close()
    with Worker(HARNESS, scratch_root=tmp_path, init=INIT) as w:
        assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"
        assert forkserver._server is not old and parent_of(w.proc.pid) == forkserver._server.proc.pid


def test_a_parent_killed_takes_its_server_and_workers_with_it(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from kernelrl.evaluate.evaluator import HARNESS
        from kernelrl.sandbox import forkserver
        from kernelrl.sandbox.process import Worker
        w = Worker(HARNESS, scratch_root=Path(sys.argv[1]), init={"role": "candidate", "device": "cpu"})
        w.request({"op": "ready"}, 120)
        print(w.proc.pid, forkserver._server.proc.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        worker, server = parent.stdout.readline().split()
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 30
        while (running(int(worker)) or running(int(server))) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not running(int(worker)) and not running(int(server))
    finally:
        parent.kill()


def test_with_the_server_turned_off_a_worker_is_a_fresh_interpreter(tmp_path, monkeypatch):
    monkeypatch.setattr(forkserver, "ENABLED", False)
    with Worker(HARNESS, scratch_root=tmp_path, init=INIT) as w:
        assert isinstance(w.proc, subprocess.Popen) and parent_of(w.proc.pid) == os.getpid()
        assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"


def test_a_server_that_ends_before_forking_anything_leaves_workers_to_fresh_interpreters(tmp_path, monkeypatch):
    broken = forkserver.ForkServer(dict(os.environ))
    broken.proc.kill()
    broken._reader.join(timeout=30)
    assert broken.dead and not broken.forked
    monkeypatch.setattr(forkserver, "_server", broken)
    monkeypatch.setattr(forkserver, "_server_pid", os.getpid())
    try:
        with Worker(HARNESS, scratch_root=tmp_path, init=INIT) as w:
            assert isinstance(w.proc, subprocess.Popen)
            assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"
    finally:
        broken.close()


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_a_forked_worker_opens_the_gpu_as_a_fresh_one_does(device, tmp_path):
    # The server imports torch but never initialises CUDA, so its children open the device themselves (`_init_cuda`
    # runs before confinement); a child of a process that had would fail here. "cuda" alone: the current device.
    with Worker(HARNESS, scratch_root=tmp_path, init={"role": "candidate", "device": device}) as w:
        assert isinstance(w.proc, forkserver.Forked)
        try:
            reply = w.request({"op": "ready"}, 120)[0]
        except WorkerError as e:  # the worker's own stderr says why it did not open the device
            pytest.fail(f"{e}\n{e.stderr_tail}")
        assert reply["type"] == "ready"
