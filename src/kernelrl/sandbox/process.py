"""Parent side of a worker: spawn it confined, send requests, read framed replies, kill it on timeout.

A worker is a `python -m kernelrl.sandbox.worker` process (forked by this process's fork server, which has imported
torch once, or a fresh interpreter: `forkserver`) in its own session, with an allow-listed environment (no keys or
tokens), its own scratch directory as cwd/HOME/TMPDIR, and one socket to the parent.
Requests are pickled (parent to worker only); replies are `wire` messages, never unpickled.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle
from pathlib import Path

from kernelrl.sandbox import devshare, forkserver, wire
from kernelrl.sandbox.confine import scrub_env

# Variables a worker may inherit; everything else (API keys, tokens, credentials) is dropped.
_ENV_ALLOW = ("PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "PYTHONPATH",
              "VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
              "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CC", "CXX", "NVCC_CCBIN",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "KERNELRL_SIZE",
              "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def _thread_state(stat: str) -> str:
    """A thread's state letter from its /proc stat file (R running, S sleeping, T stopped ...)."""
    with open(stat) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class WorkerError(RuntimeError):
    """The worker did not answer: it died, hung, or sent something malformed."""

    def __init__(self, kind: str, message: str, stderr_tail: str = ""):
        super().__init__(message)
        self.kind = kind  # "died", "timeout", "malformed"
        self.stderr_tail = stderr_tail


def worker_env(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker starts with: allow-listed variables only, secrets never."""
    env = scrub_env({k: v for k, v in os.environ.items() if k in _ENV_ALLOW})
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONNOUSERSITE="1")
    env.update(extra or {})
    return env


class Worker:
    """One spawned worker process; `request` sends an op and waits for its reply."""

    def __init__(self, entry: str, *, scratch_root: Path, writable: list[Path] = (), confine: bool = True,
                 memory_bytes: int = 0, env: dict[str, str] | None = None, init: dict | None = None,
                 affinity: list[int] | None = None):
        scratch_root.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="w-", dir=scratch_root))
        parent_sock, child_sock = socket.socketpair()
        self._log = open(self.scratch.parent / f"{self.scratch.name}.log", "w+b")
        # Large replies' tensors come through this memory file rather than the socket (see `wire`).
        self._spill = wire.make_spill()
        self._mapped = wire.Mapped(self._spill) if self._spill is not None else None
        self._locked = False  # whether the worker holds its side of the spill file page-locked
        self._shared = None  # device memory lent to the worker for its large replies (`devshare.Shared`)
        spec = {"entry": entry, "scratch": str(self.scratch), "writable": [str(p) for p in writable],
                "confine": confine, "memory_bytes": memory_bytes, "init": init or {},
                "affinity": list(affinity) if affinity else None, "spill_fd": self._spill}
        own_env, self.proc = worker_env(self.scratch, env), None
        if forkserver.ENABLED:  # forked from a process that has imported torch already
            fds = {"socket": child_sock.fileno(), "log": self._log.fileno()}
            if self._spill is not None:
                fds["spill"] = self._spill
            try:
                self.proc = forkserver.server(worker_env(Path(tempfile.gettempdir()))).spawn(
                    spec, own_env, str(self.scratch), fds)
            except forkserver.ForkServerError:
                pass  # a fresh interpreter instead
        if self.proc is None:
            cmd = [sys.executable, "-m", "kernelrl.sandbox.worker", str(child_sock.fileno()), json.dumps(spec)]
            fds = (child_sock.fileno(),) + ((self._spill,) if self._spill is not None else ())
            self.proc = subprocess.Popen(
                cmd, cwd=self.scratch, env=own_env, stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=subprocess.STDOUT, pass_fds=fds, start_new_session=True)
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.started = time.monotonic()

    def request(self, op: dict, timeout: float, device=None):
        """Send `op`, return (header, tensors) of the reply; raises WorkerError if none comes in `timeout` s.
        Large tensors of the reply land on `device` when it is a GPU (`wire.decode`)."""
        self.send(op)
        return self.receive(timeout, device)

    def send(self, op: dict) -> None:
        """Send `op` without waiting for the reply (pair with `receive`)."""
        try:
            self.conn.send_bytes(pickle.dumps(op, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, ConnectionResetError, OSError):
            raise self._died()

    def receive(self, timeout: float, device=None):
        """The reply to the last op sent: (header, tensors); raises WorkerError if none comes in `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerError("timeout", f"no answer within {timeout:.0f} s", self.stderr_tail())
            if self.conn.poll(min(left, 0.5)):
                break
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise self._died()
        try:
            message = self.conn.recv_bytes()
        except (EOFError, OSError):
            raise self._died()
        try:
            return wire.decode(message, self._spill, device, self._shared or self._mapped)
        except wire.WireError as e:
            self.kill()
            raise WorkerError("malformed", f"malformed reply from worker: {e}", self.stderr_tail())
        finally:
            if self._spill is not None and os.fstat(self._spill).st_size > wire.SPILL_KEEP:
                wire.release(self._spill, self._mapped)  # the reply is read: give its memory back

    def reserve(self, nbytes: int) -> None:
        """Allocate the spill file's pages for replies of `nbytes` ahead of them (host memory only; nothing is
        locked), so that locking it later (`page_lock`) need not fault in and zero gigabytes."""
        if not self._sized(nbytes):
            return
        try:
            os.posix_fallocate(self._spill, 0, nbytes)
        except OSError:
            pass  # no room now: the pages come as the replies are written

    def _sized(self, nbytes: int) -> bool:
        """Grow the spill file to `nbytes` where replies that large are worth locking (else False)."""
        if self._spill is None or not wire.SPILL_AT <= nbytes <= wire.SPILL_KEEP:
            return False
        if os.fstat(self._spill).st_size < nbytes:
            os.ftruncate(self._spill, nbytes)
        return True

    def page_lock(self, nbytes: int, timeout: float, device) -> bool:
        """Make replies of `nbytes` reach `device` without staging: through device memory lent to the worker
        (`share`) where the driver and device allow it, else through the spill file page-locked on both sides at
        once (`wire.Mapped`), so that they move by DMA; False where it is not worth it or cannot be done (replies
        are then staged). Raises WorkerError like `request`. Undo with `unlock`."""
        if not self._sized(nbytes):  # where the file is locked, `reserve` allocated its pages in the CPU stage
            return False
        if self.share(nbytes, timeout, device):
            return True
        self.send({"op": "spill", "lock": True})
        mine = self._mapped.lock(nbytes, device)  # while the worker locks its own mapping
        header, _ = self.receive(timeout)
        self._locked = bool(header.get("locked"))
        return mine and self._locked

    @property
    def lent(self) -> bool:
        """Whether the worker holds device memory lent for its large replies (`share`)."""
        return self._shared is not None

    def share(self, nbytes: int, timeout: float, device) -> bool:
        """Lend the worker `nbytes` of `device`'s memory for its large replies (`devshare.Shared`, the file
        descriptor passed over the socket); False where that cannot be done here or in the worker. Raises
        WorkerError like `request`. Undo with `unlock`."""
        if not devshare.ENABLED or not str(device or "").startswith("cuda"):
            return False
        if self._shared is not None:  # a new lending replaces the one before
            self.unlock(timeout)
        try:
            shared, fd = devshare.Shared.create(nbytes, device)
        except devshare.ShareError:
            return False
        try:
            try:
                self.send({"op": "spill", "share": shared.size})
                send_handle(self.conn, fd, self.proc.pid)
            except OSError:
                raise self._died()
            finally:
                os.close(fd)
            header, _ = self.receive(timeout)
        except BaseException:
            shared.drop()
            raise
        if not header.get("shared"):
            shared.drop()
            return False
        self._shared, self._locked = shared, True
        return True

    def unlock(self, timeout: float) -> None:
        """Undo `page_lock` on both sides (the file keeps its pages; lent device memory is freed)."""
        if self._mapped is None or not (self._mapped.size or self._locked):
            return
        self._mapped.drop()
        if self._shared is not None:
            self._shared.drop()
            self._shared = None
        self._locked = False
        self.request({"op": "spill", "lock": False}, timeout)

    def _died(self) -> WorkerError:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            what = f"the worker was killed by {name}"
        else:
            what = f"the worker exited with code {code} before answering"
        return WorkerError("died", what, self.stderr_tail())

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            self._log.flush()
            size = os.path.getsize(self._log.name)
            with open(self._log.name, "rb") as f:
                f.seek(max(0, size - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self):
        """End the worker and everything it started (its whole process session)."""
        if self.signal_kill():
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def signal_kill(self) -> bool:
        """Send the worker's whole process session SIGKILL (what it left behind, where it has ended) and return at
        once; whether it was still running (`kill` then waits for it, `close` reaps it)."""
        running = self.proc.poll() is None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if running:
                self.proc.kill()
        return running

    def pause(self, stop: bool, wait: bool = True) -> None:
        """Stop (SIGSTOP) or continue (SIGCONT) the worker's whole process session; nothing once it has ended (its
        process reaped, so that its group id is not another's). A stop returns once the worker's threads have
        stopped (`wait_stopped`), unless `wait` is False (the caller waits, having stopped several at once)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                return
            if stop and wait:
                self.wait_stopped(self.STOP_WAIT_S)

    STOP_WAIT_S = 0.1  # the longest `pause` waits for the worker's threads to stop

    def wait_stopped(self, most: float) -> bool:
        """Wait (at most `most` s) until every thread of the worker's process has stopped: a stop signal takes
        effect when each thread next runs, so one that was running goes on for a moment after it is sent. False
        where one still runs then (or /proc cannot tell)."""
        tasks = f"/proc/{self.proc.pid}/task"
        end = time.monotonic() + most
        while True:
            try:
                states = [_thread_state(f"{tasks}/{t}/stat") for t in os.listdir(tasks)]
            except OSError:  # gone, or no /proc
                return False
            if all(s in "TtZX" for s in states):
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.0005)

    def close(self):
        """Kill the worker and remove its scratch directory."""
        self.kill()
        try:
            self.conn.close()
        except OSError:
            pass
        self._log.close()
        if self._shared is not None:
            self._shared.drop()
            self._shared = None
        if self._spill is not None:
            self._mapped.drop()
            os.close(self._spill)
            self._spill = None
        shutil.rmtree(self.scratch, ignore_errors=True)
        try:
            os.unlink(self._log.name)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
