"""A fork server for workers: one unconfined process per evaluating process that has imported torch once, and forks
each worker from there instead of starting a fresh interpreter that imports it again (about 2 s of a core, twice a
job: a reference and a candidate).

The server is started like a worker (`python -m kernelrl.sandbox.forkserver FD`, the allow-listed environment, no
secrets) and answers only its parent, over a private socket pair. For each worker it receives the worker's
descriptors (its socket, its log, its spill file) and its environment, working directory and spec, forks, and the
child becomes the worker exactly as `python -m kernelrl.sandbox.worker` would: its own session, the environment
given, every other descriptor closed (the server's socket first), then `worker.main`, which confines it. The server
reaps its children and reports each exit status; when its parent goes, it kills them and ends.

`KERNELRL_FORK_SERVER=0` in the evaluating process's environment starts every worker as a fresh interpreter instead.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback

ENABLED = os.environ.get("KERNELRL_FORK_SERVER", "1") != "0"
# A spec carries the task's source: one larger than the socket carries in a message (this, or less where the
# kernel caps socket buffers) starts a fresh interpreter instead (`ForkServerError`)
MAX_MESSAGE = 8 << 20
_PRELOAD = ("torch", "numpy", "kernelrl.sandbox.worker", "kernelrl.sandbox.wire", "kernelrl.sandbox.confine",
            "kernelrl.sandbox.devshare", "kernelrl.evaluate.harness")


class ForkServerError(RuntimeError):
    """The fork server could not start a worker (it died, or refused the request)."""


class Forked:
    """A worker forked by the server, with the part of `subprocess.Popen`'s interface `Worker` uses."""

    def __init__(self, pid: int, server: "ForkServer"):
        self.pid = pid
        self._server = server

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._server.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        return code

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class ForkServer:
    """The parent's side: `spawn` hands the server a worker's descriptors and spec and returns a `Forked`."""

    def __init__(self, env: dict[str, str]):
        self._sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for s in (self._sock, child):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE + 4096)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, MAX_MESSAGE + 4096)
        # It writes nothing: the root as its working directory, no folder of its own to leave behind when it is
        # killed (Ray ends its actors' descendants so); each worker gets its own (`Worker`)
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelrl.sandbox.forkserver", str(child.fileno())],
                                     cwd="/", env=env, stdin=subprocess.DEVNULL, pass_fds=(child.fileno(),),
                                     start_new_session=True)
        child.close()
        self._lock = threading.Lock()  # one request at a time: its reply is the next non-exit message
        self._cond = threading.Condition()
        self._replies: list[dict] = []
        self._exits: dict[int, int] = {}
        self._children: set[int] = set()
        self.dead = False
        self.forked = 0  # workers it has forked
        self._reader = threading.Thread(target=self._read, name="kernelrl-forkserver", daemon=True)
        self._reader.start()

    def spawn(self, spec: dict, env: dict[str, str], cwd: str, fds: dict[str, int], timeout: float = 120) -> Forked:
        """Fork a worker: `fds` names the descriptors it keeps (`socket`, `log`, `spill`), passed by number."""
        names = sorted(fds)
        body = json.dumps({"spec": spec, "env": env, "cwd": cwd, "fds": names}).encode()
        with self._lock:
            if self.dead:
                raise ForkServerError("the fork server has ended")
            try:
                socket.send_fds(self._sock, [body], [fds[n] for n in names])
            except OSError as e:
                raise ForkServerError(f"cannot hand the fork server a spec of {len(body)} bytes: {e}") from e
            with self._cond:
                if not self._cond.wait_for(lambda: self._replies or self.dead, timeout):
                    raise ForkServerError(f"the fork server did not fork within {timeout:.0f} s")
                if not self._replies:
                    raise ForkServerError("the fork server has ended")
                reply = self._replies.pop(0)
        if "pid" not in reply:
            raise ForkServerError(f"the fork server could not fork: {reply.get('error')}")
        return Forked(reply["pid"], self)

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits, timeout)
            return self._exits.get(pid)

    def _read(self) -> None:
        while True:
            try:
                message = json.loads(self._sock.recv(65536) or b"null")
            except (OSError, ValueError):
                message = None
            if not isinstance(message, dict):  # the server is gone (or talks nonsense: the same to us)
                break
            with self._cond:
                if "exited" in message:
                    self._exits[message["exited"]] = message["code"]
                    self._children.discard(message["exited"])
                else:
                    if "pid" in message:  # counted here, before any report of its exit can arrive
                        self._children.add(message["pid"])
                        self.forked += 1
                    self._replies.append(message)
                self._cond.notify_all()
        # The server is gone: its children end with it (they watch their parent); none of them is reaped here, so
        # each counts as killed.
        with self._cond:
            self.dead = True
            for pid in self._children:
                self._exits.setdefault(pid, -signal.SIGKILL)
            self._children.clear()
            self._cond.notify_all()

    def close(self) -> None:
        try:
            self._sock.close()  # the server kills what it forked and ends
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_server: ForkServer | None = None
_server_pid = 0
_server_lock = threading.Lock()


def server(env: dict[str, str]) -> ForkServer:
    """This process's fork server, started on first use (and again after it ended, or in a forked copy of this
    process, which must not share its parent's). Raises ForkServerError where one ended before it forked anything:
    this install cannot run it, and workers start as fresh interpreters."""
    global _server, _server_pid
    with _server_lock:
        if _server is not None and _server_pid == os.getpid() and _server.dead and not _server.forked:
            raise ForkServerError("the fork server ended before it forked a worker")
        if _server is None or _server.dead or _server_pid != os.getpid():
            _server, _server_pid = ForkServer(env), os.getpid()
        return _server


# -- the server's side --------------------------------------------------------------------------------------------
def _child(conn: socket.socket, request: dict, fds: list[int], started: int) -> None:
    """In the forked child: become the worker `python -m kernelrl.sandbox.worker` would have been. `started` is told
    once it leads a session of its own, before the parent hears its pid (`Worker.kill` ends that session)."""
    try:
        named = dict(zip(request["fds"], fds))
        os.setsid()
        os.write(started, b"s")
        conn.close()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(named["log"], 1)
        os.dup2(named["log"], 2)
        keep = {0, 1, 2, named["socket"]} | ({named["spill"]} if "spill" in named else set())
        for fd in [int(f) for f in os.listdir("/proc/self/fd")]:
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        spec = dict(request["spec"], spill_fd=named.get("spill"))
        from kernelrl.sandbox import worker

        worker.main([str(named["socket"]), json.dumps(spec)])
    except SystemExit as e:
        os._exit(e.code if isinstance(e.code, int) else 1)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def _reap(conn: socket.socket, children: set[int]) -> bool:
    """Report the children that ended; False where the parent cannot hear it (it is gone)."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return True
        children.discard(pid)
        if not _tell(conn, {"exited": pid, "code": os.waitstatus_to_exitcode(status)}):
            return False
    return True


def _tell(conn: socket.socket, message: dict) -> bool:
    try:
        conn.send(json.dumps(message).encode())
        return True
    except OSError:  # the parent is gone
        return False


def _end(children: set[int]) -> None:
    """The parent is gone: so are its workers, and this server."""
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


def serve(fd: int) -> None:
    import warnings

    # Python warns that forking a process with threads may deadlock: the only threads here are the numeric
    # libraries' idle pools, which register their own fork handlers
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
    conn = socket.socket(fileno=fd)
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
    for module in _PRELOAD:
        try:
            __import__(module)
        except Exception:  # a module this install lacks: its workers import what they need themselves
            pass
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([conn], [], [], 0.05)
        if not _reap(conn, children):
            _end(children)
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE + 4096, 8)
        except OSError:
            data, fds = b"", []
        if not data:
            _end(children)
        try:
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            started, told = os.pipe()
            pid = os.fork()
        except BaseException as e:
            for f in fds:
                os.close(f)
            if not _tell(conn, {"error": f"{type(e).__name__}: {e}"}):
                _end(children)
            continue
        if pid == 0:
            os.close(started)
            _child(conn, request, fds, told)
        os.close(told)
        os.read(started, 1)  # its session is set up (or it has ended)
        os.close(started)
        for f in fds:
            os.close(f)
        children.add(pid)
        if not _tell(conn, {"pid": pid}):
            _end(children)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
