"""The compile gate (`evaluate/compilegate.py`) in this process, with Dynamo's compile callbacks run as a compilation
runs them and the evaluator's side recorded: what the worker says, and when."""
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
