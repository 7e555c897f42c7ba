"""The compile gate (`evaluate/compilegate.py`) in this process, with Dynamo's compile callbacks run as a compilation
runs them and the evaluator's side recorded: what the worker says, and when."""
import sys

import torch
import torch._dynamo  # noqa: F401  (imported, as by a candidate that calls torch.compile)
from torch._dynamo.callback import CallbackTrigger, callback_handler
from torch._inductor.runtime import benchmarking

from kernelrl.evaluate.compilegate import compile_gate


def _gate(said, synced):
    return compile_gate(lambda header: said.append(header["compiling"]) or {"op": "go"},
                        lambda: synced.append(len(said)), lambda: False)


def test_a_compilation_gives_the_device_back_and_a_measurement_inside_it_takes_it_first():
    said, synced = [], []
    with _gate(said, synced):
        with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0"):
            assert said == [True] and synced == [0]  # the device finished this process's work first
            ms = benchmarking.benchmarker.benchmark(lambda: torch.ones(4).sum(), device="cpu", warmup=1, rep=1)
            assert ms >= 0
            assert said == [True, False, True]  # held for the measurement, given back after it
        assert said == [True, False, True, False]  # held again before the compiled code runs
    assert said == [True, False, True, False]
    assert "benchmark" not in vars(benchmarking.benchmarker)  # the measurements are Inductor's own again


def test_recording_a_cuda_graph_keeps_the_device_and_a_failed_compilation_ends_holding_it():
    said, synced = [], []
    with _gate(said, synced):
        with callback_handler.install_callbacks(CallbackTrigger.CUDAGRAPH_RECORDING, "0/0"):
            pass
        assert said == []
        try:
            with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/1"):
                raise RuntimeError("the compilation failed")
        except RuntimeError:
            pass
    assert said == [True, False]
    with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/2"):  # no gate: nothing said
        pass
    assert said == [True, False]


def _triton(monkeypatch, cache_hook=None, post_hook=None):
    """Triton's hook points as `triton.knobs` has them (3.4 on), for a program that imported Triton: this
    environment has no Triton, whose JIT calls them around each compilation (the GPU test compiles for real)."""
    import types

    knobs = types.SimpleNamespace(runtime=types.SimpleNamespace(jit_cache_hook=cache_hook,
                                                                jit_post_compile_hook=post_hook))
    monkeypatch.setitem(sys.modules, "triton.knobs", knobs)
    return knobs.runtime


def test_a_triton_compilation_gives_the_device_back_and_takes_it_before_the_kernel_runs(monkeypatch):
    seen = []
    runtime = _triton(monkeypatch, cache_hook=lambda **kw: seen.append(("cache", kw["key"])) or False,
                      post_hook=lambda **kw: seen.append(("post", kw["key"])))
    said, synced = [], []
    with _gate(said, synced):
        assert runtime.jit_cache_hook(key="k1", repr="r") is False  # the earlier hook's answer: compile it
        assert said == [True] and synced == [0]  # the device finished this process's work first
        runtime.jit_post_compile_hook(key="k1", repr="r")
        assert said == [True, False]
    assert seen == [("cache", "k1"), ("post", "k1")]  # the hooks set before are called, and set again after
    assert runtime.jit_cache_hook(key="k2") is False and seen[-1] == ("cache", "k2") and said == [True, False]


def test_a_triton_compilation_inside_a_dynamo_one_or_a_capture_says_nothing_and_a_failed_one_ends_held(
        monkeypatch):
    runtime = _triton(monkeypatch)
    said, synced = [], []
    with _gate(said, synced):
        with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0"):
            runtime.jit_cache_hook(key="inductor")  # Inductor's kernels, compiled while Dynamo gave it back
            runtime.jit_post_compile_hook(key="inductor")
            assert said == [True]
        assert said == [True, False]
        runtime.jit_cache_hook(key="failed")  # a compilation that raised: no post-compile hook
    assert said == [True, False, True, False]
    assert runtime.jit_cache_hook is None and runtime.jit_post_compile_hook is None
    capturing = compile_gate(lambda header: said.append(header["compiling"]) or {"op": "go"}, lambda: None,
                             lambda: True)
    with capturing:
        runtime.jit_cache_hook(key="captured")
        runtime.jit_post_compile_hook(key="captured")
    assert said == [True, False, True, False]
