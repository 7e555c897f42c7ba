"""Runs in a candidate's worker: its first call gives the device back while torch.compile or Triton compiles.

A candidate's first call (`Evaluator._first_call`) holds the device beside untimed work, and the GPU stage's timing
waits for it. Most of a torch.compile candidate's first call is its compilation: Dynamo's trace, AOTAutograd and
Inductor's code generation and kernel builds, work of the CPU that launches nothing on the device; part of a Triton
candidate's is Triton's JIT compiling its kernels (LLVM and ptxas: 0.57 s of the 2.16 s a Triton first call took
beyond its waits in `benchmarks/results/throughput_grpo_h200/triton_gate/`). `compile_gate`
tells the evaluator when such a compilation starts, once the device has finished this worker's work, so that the
device may be timed meanwhile, and asks for it again before the compiled code runs. Inductor's own measurements of
kernels while it compiles (its padding pass, max-autotune's choices: `MEASURING`) ask for the device first too.
Triton's compilations are seen through its JIT hooks (`triton.knobs.runtime.jit_cache_hook`, called before a kernel
is compiled, and `jit_post_compile_hook`, after; Triton 3.4 on), chained to any hooks already set.

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
    not been imported (the program compiles nothing: no trace starts without it) or offers no compile callbacks;
    Triton's compilations give it back too, where the program has imported Triton (`_triton_hooks`)."""
    gate = _Given(converse, sync)
    with _triton_hooks(gate, capturing):
        if "torch._dynamo" not in sys.modules:
            yield
            return
        with _dynamo_gate(gate, capturing):
            yield


class _Given:
    """Whether the device is given back now, and by whose compilation (`by`: "dynamo", "triton", None while held)."""

    def __init__(self, converse, sync):
        self.converse, self.sync, self.by = converse, sync, None

    def give(self, by: str) -> None:
        """Give the device back for `by`'s compilation, once this process's work on it is done (a no-op where it is
        given back already)."""
        if self.by is None:
            self.sync()
            self.converse({"type": "gate", "compiling": True})
            self.by = by

    def take(self, by: str | None = None) -> None:
        """Have the device again, where it was given back (by `by`'s compilation, or by any)."""
        if self.by is not None and by in (None, self.by):
            self.converse({"type": "gate", "compiling": False})
            self.by = None


@contextlib.contextmanager
def _dynamo_gate(gate: _Given, capturing):
    """Dynamo's compilations give the device back (`compile_gate`)."""
    try:
        from torch._dynamo.callback import callback_handler
        from torch._inductor.runtime import benchmarking
        bench = benchmarking.benchmarker
    except (ImportError, AttributeError):
        yield
        return

    def give(*args) -> None:
        trigger = getattr(args[0], "callback_trigger", None) if args else None
        if (trigger is not None and getattr(trigger, "name", "") != "DYNAMO") or capturing():
            return  # CUDA graph recording and runtime autotuning run on the device: they keep it
        gate.give("dynamo")

    def end(*args) -> None:
        gate.take()

    @contextlib.contextmanager
    def measuring():  # Inductor times kernels on the device while it compiles: with the device held
        was = gate.by
        gate.take()
        try:
            yield
        finally:
            if was:
                gate.give(was)

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
        gate.take()  # a compilation that failed may not have ended: the rest of the call holds the device


@contextlib.contextmanager
def _triton_hooks(gate: _Given, capturing):
    """Within the block, a Triton kernel's JIT compilation gives the device back (`_Given.give`) and takes it again
    once compiled, before the kernel is loaded and launched: Triton's `jit_cache_hook` and `jit_post_compile_hook`,
    each calling the hook set before it (the cache hook's answer, whether to skip the compilation, is that hook's).
    Nothing is given back inside a compilation that gave it already (Inductor compiling Triton kernels within a
    Dynamo compilation), while a CUDA graph is captured, or where Triton compiles asynchronously (its post-compile
    hook then runs elsewhere). A no-op where the program has not imported Triton or its Triton has no such hooks."""
    knobs = getattr(sys.modules.get("triton.knobs"), "runtime", None)
    if knobs is None or not hasattr(knobs, "jit_cache_hook") or not hasattr(knobs, "jit_post_compile_hook"):
        yield
        return
    before, after = knobs.jit_cache_hook, knobs.jit_post_compile_hook

    def asynchronous() -> bool:
        mode = getattr(getattr(sys.modules.get("triton.runtime.jit"), "_async_compile", None), "active_mode", None)
        return mode is not None and mode.get() is not None

    def starting(*args, **kw):
        if not capturing() and not asynchronous():
            gate.give("triton")
        return before(*args, **kw) if before is not None else None

    def compiled(*args, **kw):
        gate.take("triton")  # (not where the end of a Dynamo compilation took it already)
        return after(*args, **kw) if after is not None else None

    knobs.jit_cache_hook, knobs.jit_post_compile_hook = starting, compiled
    try:
        yield
    finally:
        if knobs.jit_cache_hook is starting:
            knobs.jit_cache_hook = before
        if knobs.jit_post_compile_hook is compiled:
            knobs.jit_post_compile_hook = after
        gate.take("triton")  # a compilation that failed has not ended: the rest of the call holds the device


# Inductor's measurements of kernels on the device (`torch._inductor.runtime.benchmarking.benchmarker`)
MEASURING = ("benchmark", "benchmark_gpu", "benchmark_gpu_with_cuda_graph")
