"""Where the correctness stage's time goes on KernelBench's gigabyte tasks, step by step.

Usage: python benchmarks/eval_trial_profile.py KERNELBENCH_DIR OUT_DIR [--tasks level1/19_ReLU.py,...]

Part 1, the spill path alone on one buffer of the task's output size: allocating a sealed spill file's pages,
page-locking a mapping of it on each side (`wire.Mapped`), device to file and file to device by DMA, unlocking,
against the staged path (pinned 64 MB buffer and pwrite/preadv); and the lent path (`devshare.Shared`):
allocating device memory, mapping it from its file descriptor, the copies in and out, giving it back. Part 2, one
evaluation of the task's identity candidate with the parent's side of every request timed: from sending an op to
its reply's arrival (the worker's run and its encoding), the reply's decoding, the parent's lending or
page-locking, and each full comparison. Writes OUT_DIR/eval_trial_profile.json
and prints a summary per task.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate import compare as cmp
from kernelrl.sandbox import devshare, process, wire
from kernelrl.task import Task, identity_candidate

DEFAULT = "level1/19_ReLU.py,level1/23_Softmax.py,level1/36_RMSNorm_.py"


def _sync_time(fn) -> tuple[float, object]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def spill_path(nbytes: int) -> dict:
    """Each step of moving one `nbytes` device buffer through a spill file and back onto the device."""
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    fd = wire.make_spill()
    os.ftruncate(fd, nbytes)
    sender, receiver = wire.Mapped(fd), wire.Mapped(fd)
    res = {"bytes": nbytes}
    try:
        res["reserve_s"], _ = _sync_time(lambda: os.posix_fallocate(fd, 0, nbytes))
        res["lock_sender_s"], _ = _sync_time(lambda: sender.lock(nbytes))
        res["device_to_file_s"], _ = _sync_time(lambda: sender.view(nbytes).copy_(src))
        res["lock_receiver_s"], _ = _sync_time(lambda: receiver.lock(nbytes, "cuda"))
        res["file_to_device_s"], back = _sync_time(lambda: receiver.view(nbytes).to("cuda", copy=True))
        assert torch.equal(back, src)
        del back
        res["unlock_both_s"], _ = _sync_time(lambda: (sender.drop(), receiver.drop()))
        message = None

        def staged_encode():
            nonlocal message
            message = wire.encode({}, {"x": src}, fd)

        res["staged_device_to_file_s"], _ = _sync_time(staged_encode)
        res["staged_file_to_device_s"], _ = _sync_time(lambda: wire.decode(message, fd, "cuda"))
        res["release_s"], _ = _sync_time(lambda: wire.release(fd))
    finally:
        sender.drop()
        receiver.drop()
        os.close(fd)
    return res


def lent_path(nbytes: int) -> dict:
    """Each step of moving one `nbytes` device buffer through lent device memory (`devshare.Shared`), both sides
    in this process: allocating and clearing it, mapping it a second time from its file descriptor (the worker's
    side), the copy in and the copy out, and giving both sides back."""
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    res = {"bytes": nbytes}
    res["create_s"], (lender, fd) = _sync_time(lambda: devshare.Shared.create(nbytes, "cuda"))
    try:
        res["attach_s"], borrower = _sync_time(lambda: devshare.Shared.attach(fd, lender.size, "cuda"))
        res["copy_in_s"], _ = _sync_time(lambda: borrower.view(nbytes).copy_(src))
        res["copy_out_s"], back = _sync_time(lambda: lender.view(nbytes).clone())
        assert torch.equal(back, src)
        del back
        res["drop_both_s"], _ = _sync_time(lambda: (borrower.drop(), lender.drop()))
    finally:
        lender.drop()
    return res


class Recorder:
    """The parent's side of each worker request, timed by patching `process.Worker` and `wire`."""

    def __init__(self):
        self.events, self._sent, self._role = [], {}, {}
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return round(time.perf_counter() - self.t0, 4)

    def install(self):
        rec = self
        init, send, receive = process.Worker.__init__, process.Worker.send, process.Worker.receive
        decode, lock, compare, share = wire.decode, wire.Mapped.lock, cmp.compare, process.Worker.share

        def p_init(w, *a, **kw):
            init(w, *a, **kw)
            rec._role[id(w)] = (kw.get("init") or {}).get("role", "?")

        def p_send(w, op):
            rec._sent[id(w)] = (op.get("op"), time.perf_counter())
            return send(w, op)

        def p_receive(w, timeout, device=None):
            op, sent = rec._sent.get(id(w), ("?", time.perf_counter()))
            t = time.perf_counter()
            try:
                return receive(w, timeout, device)
            finally:
                rec.events.append({"at": rec.now(), "role": rec._role.get(id(w), "?"), "op": op,
                                   "since_send_s": round(time.perf_counter() - sent, 4),
                                   "in_receive_s": round(time.perf_counter() - t, 4)})

        def p_decode(message, spill=None, device=None, mapped=None):
            t = time.perf_counter()
            out = decode(message, spill, device, mapped)
            nbytes = sum(x.numel() * x.element_size() for x in out[1].values())
            rec.events.append({"at": rec.now(), "step": "decode", "bytes": nbytes,
                               "s": round(time.perf_counter() - t, 4)})
            return out

        def p_lock(m, size, device=None):
            t = time.perf_counter()
            ok = lock(m, size, device)
            rec.events.append({"at": rec.now(), "step": "page-lock", "bytes": size,
                               "s": round(time.perf_counter() - t, 4), "ok": ok})
            return ok

        def p_share(w, nbytes, timeout, device):
            t = time.perf_counter()
            ok = share(w, nbytes, timeout, device)
            rec.events.append({"at": rec.now(), "role": rec._role.get(id(w), "?"), "step": "lend", "bytes": nbytes,
                               "s": round(time.perf_counter() - t, 4), "ok": ok})
            return ok

        def p_compare(a, b, *args, **kw):
            t = time.perf_counter()
            out = compare(a, b, *args, **kw)
            if a.numel() > 1 << 20:
                torch.cuda.synchronize()
                rec.events.append({"at": rec.now(), "step": "compare", "elements": a.numel(),
                                   "s": round(time.perf_counter() - t, 4)})
            return out

        process.Worker.__init__, process.Worker.send, process.Worker.receive = p_init, p_send, p_receive
        wire.decode, wire.Mapped.lock, cmp.compare, process.Worker.share = p_decode, p_lock, p_compare, p_share


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tasks", default=DEFAULT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder()
    rec.install()
    results = []
    with Evaluator(EvalConfig(device="cuda")) as evaluator:
        for rel in args.tasks.split(","):
            path = args.kernelbench / rel
            task = Task.from_source(path.read_text(), name=path.stem, level=path.parent.name, path=str(path))
            rec.events = []
            t0 = time.perf_counter()
            verdict = evaluator.evaluate(task, identity_candidate(task))
            row = {"task": rel, "status": verdict.status, "wall_s": round(time.perf_counter() - t0, 2),
                   "phases": verdict.phases, "events": rec.events}
            out_bytes = max((e.get("bytes", 0) for e in rec.events if e.get("step") == "decode"), default=0)
            if out_bytes >= 1 << 20:
                row["spill_path"] = spill_path(out_bytes)
                row["lent_path"] = lent_path(out_bytes)
            results.append(row)
            print(f"{rel}: {verdict.status} phases {verdict.phases}", flush=True)
            for e in rec.events:
                print("   ", json.dumps(e), flush=True)
            print("    spill path:", json.dumps(row.get("spill_path")), flush=True)
            print("    lent path:", json.dumps(row.get("lent_path")), flush=True)
            torch.cuda.empty_cache()
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    (args.out / "eval_trial_profile.json").write_text(json.dumps({"environment": env, "tasks": results}, indent=1))


if __name__ == "__main__":
    main()
