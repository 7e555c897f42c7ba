"""Checks shared by the GEMM GPU tests: a result within twice torch.matmul's error, a launcher captured in a
CUDA graph that stays correct on fresh inputs, and a launcher run on two streams at once."""
import torch

from kernelrl.gemm import check as chk


def close(c, a, b) -> bool:
    """c is a @ b within twice torch.matmul's error against the float64 product."""
    ref = chk.reference(a, b)
    return chk.rel_err(c, ref) <= 2 * chk.rel_err(torch.matmul(a, b), ref)


def captured(fn, m: int, n: int, k: int, calls: int = 1):
    """(graph, a, b, c): fn(a, b, c) on fresh inputs, called once eagerly on the current stream, then `calls`
    times in a CUDA graph captured on torch's capture stream (a stream the launcher has not seen)."""
    a, b = chk.random_inputs(m, n, k)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    fn(a, b, c)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn(a, b, c)
    return g, a, b, c


def replays_correctly(g, a, b, c, times: int = 3) -> None:
    """Replay graph `g`, which computes c = a @ b, on fresh inputs copied into a and b; check each result."""
    for _ in range(times):
        a2, b2 = chk.random_inputs(a.shape[0], b.shape[1], a.shape[1], a.dtype)
        a.copy_(a2)
        b.copy_(b2)
        g.replay()
        torch.cuda.synchronize()
        assert close(c, a2, b2)


def on_two_streams(fn, m: int, n: int, k: int, calls: int = 50) -> list[torch.cuda.Stream]:
    """Run fn(a, b, c) `calls` times on each of two streams, interleaved so that their kernels overlap, each
    stream with its own inputs and output; check both results and return the streams."""
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    inputs = [chk.random_inputs(m, n, k) for _ in streams]
    outs = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in streams]
    torch.cuda.synchronize()
    for _ in range(calls):
        for s, (a, b), c in zip(streams, inputs, outs):
            with torch.cuda.stream(s):
                fn(a, b, c)
    torch.cuda.synchronize()
    for (a, b), c in zip(inputs, outs):
        assert close(c, a, b)
    return streams
