"""Child side of a worker: confine this process, then serve requests with the entry's handler.

Run as `python -m kernelrl.sandbox.worker FD SPEC_JSON`. The entry (`module:Class`) is constructed with the
spec's `init` dict and the confinement report; each request is a pickled dict from the trusted parent with an
`op` key, answered by `handler.handle(op) -> (header, tensors)`.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
import traceback
from multiprocessing.connection import Connection


_CACHE_VARS = ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH")


def _confine(spec: dict) -> dict:
    if not spec.get("confine"):
        return {"requested": False}
    try:
        from kernelrl.sandbox import confine
    except ImportError as e:  # pragma: no cover - confine ships with the package
        return {"requested": True, "error": f"confinement unavailable: {e}"}
    try:
        cuda = str(spec.get("init", {}).get("device", "cpu")).startswith("cuda")
        return confine.confine(spec["scratch"], spec.get("writable", []), network=False,
                               memory_bytes=spec.get("memory_bytes") or None, cuda=cuda)
    except Exception as e:  # never start unconfined silently: the report says what failed
        return {"requested": True, "error": f"{type(e).__name__}: {e}"}


def _init_cuda(spec: dict) -> None:
    """Open the GPU before confinement: the driver needs files and calls that confinement then denies.

    For the same reason torch.compile's Triton kernels are compiled in this process: a compile worker process
    started after confinement cannot open the GPU ("Could not find an active GPU backend"), and Inductor hands
    kernels to its worker pool only once the pool is up, so a large model's compile failed or not by how fast
    the pool started. "cuda" alone names the current device: the handler is given it with its index."""
    device = str(spec.get("init", {}).get("device", "cpu"))
    if device.startswith("cuda"):
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        import torch

        dev = torch.device(device)
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
            spec["init"]["device"] = str(dev)
        torch.cuda.set_device(dev)
        torch.cuda.init()
        torch.empty(1, device=dev)  # creates the context


def _attach(conn, size: int, spec: dict):
    """Receive the file descriptor of the device memory the parent lends (`Worker.share`) and map it here: the
    `devshare.Shared`, or None where it cannot be mapped (replies then go through the spill file)."""
    from multiprocessing.reduction import recv_handle

    from kernelrl.sandbox import devshare

    try:
        fd = recv_handle(conn)
    except (OSError, RuntimeError, EOFError):
        return None
    try:
        return devshare.Shared.attach(fd, size, spec.get("init", {}).get("device"))
    except Exception:  # the parent falls back to the spill file; the worker keeps serving
        traceback.print_exc()
        return None


def _exit_with_parent() -> None:
    """End this worker once its parent is gone (killed, say): a program stuck in a loop never reads the closed
    connection, and would hold a core, and its device memory, for ever. A daemon thread polls the parent's pid
    with functions taken before any untrusted code runs."""
    import threading
    import time

    parent, getppid, sleep, exit_now = os.getppid(), os.getppid, time.sleep, os._exit

    def watch():
        while getppid() == parent:
            sleep(1.0)
        exit_now(0)

    threading.Thread(target=watch, name="kernelrl-parent-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    fd, spec = int(argv[0]), json.loads(argv[1])
    if spec.get("affinity") and hasattr(os, "sched_setaffinity"):
        # Before any thread starts, so every thread and compiler process it spawns inherits these cores.
        try:
            os.sched_setaffinity(0, spec["affinity"])
        except OSError:
            pass
    # `python -m` puts the working directory (the scratch dir) first on sys.path; folders created there
    # (caches such as triton/) must not shadow installed packages.
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd(), spec["scratch"])]
    conn = Connection(fd)
    from kernelrl.sandbox import wire

    # Build caches the parent placed in writable per-source directories survive confinement's defaults.
    caches = {k: os.environ[k] for k in _CACHE_VARS if k in os.environ}
    _init_cuda(spec)
    applied = _confine(spec)
    _exit_with_parent()  # confined, and before the handler counts the threads it starts with
    os.environ.update(caches)
    module, _, cls = spec["entry"].partition(":")
    __import__(module)
    handler = getattr(sys.modules[module], cls)(spec.get("init", {}), applied, spec["scratch"])
    send_bytes = conn.send_bytes  # taken before any untrusted code can touch the class
    recv_bytes = conn.recv_bytes

    def converse(header: dict) -> dict:
        """Mid-request: send `header` to the parent and wait for its answer (an op; "exit" ends the worker)."""
        send_bytes(wire.encode(header))
        try:
            answer = pickle.loads(recv_bytes())
        except (EOFError, OSError):
            os._exit(0)
        if answer.get("op") == "exit":
            os._exit(0)
        return answer

    if hasattr(handler, "converse"):
        handler.converse = converse
    idle = getattr(handler, "idle", None)  # between requests, once the reply and what it held are gone
    spill = spec.get("spill_fd")
    mapped = wire.Mapped(spill) if spill is not None else None  # the spill file page-locked here (`wire`)
    lent = None  # device memory the parent lent for large replies (`devshare.Shared`), used in `mapped`'s place
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            os._exit(0)
        op = pickle.loads(raw)
        if op.get("op") == "exit":
            os._exit(0)
        if op.get("op") == "spill":  # for the replies to come: take lent device memory, page-lock the spill file,
            locked = shared = False  # or give up whichever is held
            if op.get("share"):  # the parent sends the memory's file descriptor right after the op
                if lent is not None:
                    lent.drop()
                lent = _attach(conn, int(op["share"]), spec)
                locked = shared = lent is not None
            elif mapped is not None and op.get("lock"):
                size = os.fstat(spill).st_size
                locked = 0 < size <= wire.SPILL_KEEP and mapped.lock(size)
            else:
                if mapped is not None:
                    mapped.drop()
                if lent is not None:
                    lent.drop()
                    lent = None
            send_bytes(wire.encode({"type": "spill", "locked": locked, "shared": shared}))
            continue
        try:
            header, tensors = handler.handle(op)
        except BaseException as e:  # the handler classifies known failures; this is the last net
            header, tensors = {"type": "error", "kind": "runtime_error",
                               "message": f"{type(e).__name__}: {e}",
                               "traceback": traceback.format_exc()[-4000:]}, None
        try:
            message = wire.encode(header, tensors, spill, lent or mapped)
        except Exception as e:
            message = wire.encode({"type": "error", "kind": "runtime_error",
                                   "message": f"cannot send result: {type(e).__name__}: {e}"})
        send_bytes(message)
        if mapped is not None and mapped.size and os.fstat(spill).st_size > wire.SPILL_KEEP:
            mapped.drop()  # the parent punches a file this large out once it has read it (`wire.release`)
        after, handler.after_reply = getattr(handler, "after_reply", None), None
        if after is not None:  # work the handler left until its reply was sent (poisoning what it sent)
            try:
                after()
            except BaseException:
                traceback.print_exc()
        header = tensors = message = after = None
        if idle is not None:
            try:
                idle()
            except BaseException:
                traceback.print_exc()


if __name__ == "__main__":
    main(sys.argv[1:])
