"""GPU specifications of the Triton tiled family and of per-stream workspaces: every tiled configuration is
correct on ragged and even shapes and in CUDA graphs, and so is each compiled for a shape its tiles cover;
cuBLASLt and CUTLASS kernels that use a workspace get one per CUDA stream, so two streams running them at once
stay correct, and a graph captured on a stream the launcher has not seen takes the spare made ahead of time."""
import pytest
import torch

pytestmark = pytest.mark.gpu

from kernelrl.gemm import check as chk  # noqa: E402
from kernelrl.gemm.registry import make_launcher  # noqa: E402
from kernelrl.gemm.shapes import Shape  # noqa: E402
from kernelrl.gemm.space import CUTLASS_CONFIGS, TILED_CONFIGS, CutlassVariant, tiled_fixed_variant  # noqa: E402
from gemm_gpu_checks import captured, on_two_streams, replays_correctly  # noqa: E402

hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                            reason="tuned and tested on sm_90")


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(200, 136, 1000), (256, 128, 512), (64, 64, 64)])
def test_every_tiled_configuration_is_correct(dtype, shape):
    m, n, k = shape  # ragged (partial tiles in m and n, K not a multiple of any BK), even, and one tile
    a, b = chk.random_inputs(m, n, k, dtype)
    ref = chk.reference(a, b)
    fixed = [v for v in (tiled_fixed_variant(c, Shape(m, n, k)) for c in TILED_CONFIGS) if v]
    assert bool(fixed) == (shape != (200, 136, 1000))  # where the tiles cover the output, compiled for it too
    for cfg in (*TILED_CONFIGS, *fixed):
        res = chk.check(make_launcher(cfg.name, m, n, k, dtype), a, b, ref)  # poison, guard bands, two calls
        assert res.ok, (cfg.name, shape, res.reason)


@hopper
@pytest.mark.parametrize("name", ["tiled:32x64x128_s4_w2", "tiled:32x64x128_s4_w2_fixed",
                                  "tiled:64x64x128_s3_w4_fixed"])
def test_tiled_kernel_replays_in_a_cuda_graph_with_new_inputs(name):
    import triton

    from kernelrl.gemm.triton_family import DIRECT_TRITON

    m, n, k = 128, 256, 384
    fn = make_launcher(name, m, n, k)
    replays_correctly(*captured(fn, m, n, k))
    # after its first call a launcher takes Triton's C entry, the fixed kernel's sizes passed where its
    # constexprs sit
    assert fn.direct == triton.__version__.startswith(tuple(v + "." for v in DIRECT_TRITON))


def _workspace_users(m, n, k):
    """Launcher names of a cuBLASLt split-K algorithm and a CUTLASS split-K and stream-K variant: kernels
    that write partial sums into their workspace."""
    from kernelrl.gemm import cublaslt

    names = []
    for algo in cublaslt.heuristics(m, n, k, count=8):
        v = cublaslt.with_splitk(algo, m, n, k, 8)
        if v is not None and v.workspace > 0:
            names.append(v.name)
            break
    sk = next(c for c in CUTLASS_CONFIGS if c.streamk)
    names += [CutlassVariant(sk, decomposition=2, splits=8).name, CutlassVariant(sk, decomposition=3).name]
    return names


@hopper
def test_workspace_kernels_on_two_streams_at_once_each_use_their_own_workspace_and_stay_correct():
    m, n, k = 256, 256, 8192  # few output tiles, deep K: the split kernels keep partial sums in the workspace
    names = _workspace_users(m, n, k)
    assert len(names) == 3, names
    for name in names:
        fn = make_launcher(name, m, n, k)
        streams = on_two_streams(fn, m, n, k)  # checks both results
        raw = {s.cuda_stream for s in streams}
        ws = {fn.plans[r][1].data_ptr() for r in raw}
        assert raw <= set(fn.plans) and len(ws) == 2, name  # one plan and one workspace per stream


@hopper
def test_workspace_kernel_captured_on_a_new_stream_takes_the_spare_workspace_andreplays_correctly():
    from kernelrl.gemm.streams import WORKSPACES

    m, n, k = 128, 256, 8192
    sk = next(c for c in CUTLASS_CONFIGS if c.streamk)
    fn = make_launcher(CutlassVariant(sk, decomposition=3).name, m, n, k)  # reserves a spare when made
    spare = WORKSPACES._spare[torch.cuda.current_device()][0].data_ptr()
    a, b = chk.random_inputs(m, n, k)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    fn(a, b, c)
    dev = torch.cuda.current_device()
    # torch hands out streams from a pool (32 per priority), which the suite's earlier tests may all have used
    # already: this one's workspace is forgotten, as if the stream had never been seen
    new = torch.cuda.Stream()
    assert new.cuda_stream != torch.cuda.current_stream().cuda_stream
    WORKSPACES._sets.pop((dev, new.cuda_stream), None)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=new):  # a stream no launcher has used yet
        fn(a, b, c)
    captured = [ws.data_ptr() for _, ws in fn.plans.values()]
    assert spare in captured and len(set(captured)) == len(captured)
    replays_correctly(g, a, b, c)


@hopper
def test_a_plan_launcher_frees_every_plan_it_made_once_it_is_gone():
    import gc

    from kernelrl.gemm.streams import plan_launcher

    made, freed = [], []

    def make_plan(ws):
        made.append(len(made) + 1)
        return made[-1]

    def run_plan(plan, a, b, c, stream):
        return 0

    fn = plan_launcher(make_plan, run_plan, freed.append, torch.cuda.current_device(), "a test plan")
    x = torch.empty(1, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        fn(x, x, x)  # a second stream: a second plan
    assert made == [1, 2] and freed == []
    del fn
    gc.collect()
    assert sorted(freed) == [1, 2]
