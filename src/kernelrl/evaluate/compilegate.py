"""Runs in a candidate's worker: its first call gives the device back while torch.compile compiles.

A candidate's first call (`Evaluator._first_call`) holds the device beside untimed work, and the GPU stage's timing
waits for it. Most of a torch.compile candidate's first call is its compilation: Dynamo's trace, AOTAutograd and
Inductor's code generation and kernel builds, work of the CPU that launches nothing on the device. `compile_gate`
tells the evaluator when such a compilation starts, once the device has finished this worker's work, so that the
device may be timed meanwhile, and asks for it again before the compiled code runs. Inductor's own measurements of
kernels while it compiles (`benchmarker.benchmark_gpu`, as its padding pass does) ask for the device first too.

`converse(header)` sends a message to the evaluator and waits for its answer (`sandbox.worker`): {"type": "gate",
"compiling": True} once the device is given back, {"type": "gate", "compiling": False} to have it again.
"""
from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def compile_gate(converse, sync, capturing):
    """Within the block, each Dynamo compilation gives the device back (`converse`) after `sync` (the device has
    finished this process's work) and takes it again when it ends; not while a CUDA graph is being captured
    (`capturing()`), where the compilation's caller records work on the device. A no-op where torch.compile has
    not been imported (the program compiles nothing: no trace starts without it) or offers no compile callbacks."""
    if "torch._dynamo" not in sys.modules:
        yield
        return
    try:
        from torch._dynamo.callback import callback_handler
        from torch._inductor.runtime import benchmarking
        bench = benchmarking.benchmarker
        measure = bench.benchmark_gpu
    except (ImportError, AttributeError):
        yield
        return
    given = [False]  # whether the device is given back now

    def take() -> None:
        if given[0]:
            converse({"type": "gate", "compiling": False})
            given[0] = False

    def give(*args) -> None:
        trigger = getattr(args[0], "callback_trigger", None) if args else None
        if given[0] or (trigger is not None and getattr(trigger, "name", "") != "DYNAMO") \
                or capturing():
            return  # CUDA graph recording and runtime autotuning run on the device: they keep it
        sync()
        converse({"type": "gate", "compiling": True})
        given[0] = True

    def measured(*args, **kw):  # Inductor times kernels on the device while it compiles: with the device held
        was = given[0]
        take()
        try:
            return measure(*args, **kw)
        finally:
            if was:
                give()

    def end(*args) -> None:
        take()

    callback_handler.register_start_callback(give)
    callback_handler.register_end_callback(end)
    own = "benchmark_gpu" in vars(bench)
    bench.benchmark_gpu = measured
    try:
        yield
    finally:
        callback_handler.remove_start_callback(give)
        callback_handler.remove_end_callback(end)
        if own:
            bench.benchmark_gpu = measure
        else:
            del bench.benchmark_gpu
        take()  # a compilation that failed may not have ended: the rest of the call holds the device
