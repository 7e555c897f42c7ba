"""Runs in a candidate's worker: its first call gives the device back while torch.compile compiles.

A candidate's first call (`Evaluator._first_call`) holds the device beside untimed work, and the GPU stage's timing
waits for it. Most of a torch.compile candidate's first call is its compilation: Dynamo's trace, AOTAutograd and
Inductor's code generation and kernel builds, work of the CPU that launches nothing on the device. `compile_gate`
tells the evaluator when such a compilation starts, once the device has finished this worker's work, so that the
device may be timed meanwhile, and asks for it again before the compiled code runs. Inductor's own measurements of
kernels while it compiles (its padding pass, max-autotune's choices: `MEASURING`) ask for the device first too.

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
        if given[0] or (trigger is not None and getattr(trigger, "name", "") != "DYNAMO") or capturing():
            return  # CUDA graph recording and runtime autotuning run on the device: they keep it
        sync()
        converse({"type": "gate", "compiling": True})
        given[0] = True

    def end(*args) -> None:
        take()

    @contextlib.contextmanager
    def measuring():  # Inductor times kernels on the device while it compiles: with the device held
        was = given[0]
        take()
        try:
            yield
        finally:
            if was:
                give()

    def held(method):
        def measured(*args, **kw):
            with measuring():
                return method(*args, **kw)
        return measured

    methods = {name: getattr(bench, name) for name in MEASURING if hasattr(bench, name)}
    own = {name for name in methods if name in vars(bench)}
    hook = getattr(benchmarking, "set_gpu_benchmark_lock_context", None)  # torch 2.13 on: every measurement
    callback_handler.register_start_callback(give)
    callback_handler.register_end_callback(end)
    for name, method in methods.items():
        setattr(bench, name, held(method))
    previous = hook(measuring) if hook is not None else None
    try:
        yield
    finally:
        if hook is not None:
            hook(previous)
        for name, method in methods.items():
            if name in own:
                setattr(bench, name, method)
            else:
                delattr(bench, name)
        callback_handler.remove_start_callback(give)
        callback_handler.remove_end_callback(end)
        take()  # a compilation that failed may not have ended: the rest of the call holds the device


# Inductor's measurements of kernels on the device (`torch._inductor.runtime.benchmarking.benchmarker`)
MEASURING = ("benchmark", "benchmark_gpu", "benchmark_gpu_with_cuda_graph")
