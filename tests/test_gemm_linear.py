"""kernelrl.gemm inside models: the table per GPU, the model-shape grid, and `linear` / `patch` / `unpatch`."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kernelrl.gemm import linear, patch, unpatch
from kernelrl.gemm.dispatch import Dispatcher, device_table
from kernelrl.gemm.linear import laid_out_for_gemm
from kernelrl.gemm.shapes import MODEL_TOKENS, MODELS, Shape, model_layers, read_shapes
from kernelrl.gemm.table import DATA, Entry, Table, table_path_for

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("name, capability, table", [
    ("NVIDIA H200", (9, 0), "tuned_h200.json"),
    ("NVIDIA H100 80GB HBM3", (9, 0), "tuned_h100.json"),
    ("NVIDIA H100 PCIe", (9, 0), "tuned_h100.json"),
    ("NVIDIA GH200 480GB", (9, 0), None),  # another Hopper part: no table of its own
    ("NVIDIA A100-SXM4-80GB", (8, 0), None),
    ("NVIDIA H200", (10, 0), None),  # the kernels are built for sm_90a
])
def test_each_gpu_model_gets_its_own_table_and_others_none(name, capability, table):
    path = table_path_for(name, capability)
    assert (path.name if path else None) == table
    assert path is None or path.parent == DATA


def test_without_cuda_the_h200_table_is_loaded():
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only machine")
    assert device_table().meta.get("gpu") == "NVIDIA H200"


def test_the_model_grid_is_every_linear_layer_of_the_models_at_every_token_count():
    layers = model_layers()
    llama = MODELS["Llama-3.1-8B"]
    assert Shape(1, 4096, 4096) in layers and "Llama-3.1-8B/q_proj" in layers[Shape(1, 4096, 4096)]
    assert "Llama-3.1-8B/k_proj" in layers[Shape(16384, 1024, 4096)]  # GQA: 8 of 32 heads
    assert "Qwen2.5-7B/down_proj" in layers[Shape(512, 3584, 18944)]
    pairs = {(out_f, in_f) for cfg in MODELS.values() for out_f, in_f in cfg.linears().values()}
    assert len(layers) == len(pairs) * len(MODEL_TOKENS)
    assert llama.linears()["gate_proj"] == (14336, 4096)
    assert read_shapes("models") == list(layers)


def _table(*keys) -> Dispatcher:
    entries = tuple(Entry(m, n, k, "bf16", "triton:64x64x32", 1.0, 2.0) for m, n, k in keys)
    return Dispatcher(Table(entries, {"gpu": "test"}), fastpath=False)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 48, bias=False)).to(torch.bfloat16)


def test_patch_routes_the_known_layers_through_the_dispatch_and_keeps_their_results():
    model, x = _model(), torch.randn(3, 5, 64, dtype=torch.bfloat16)
    expected = model(x)
    weight, values = model[0].weight, model[0].weight.detach().clone()
    d = _table((15, 32, 64))  # the first layer's product for 3 x 5 tokens
    assert patch(model, d) == ["0"]
    assert model[0].weight is weight and torch.equal(weight, values)  # the same Parameter, the same values
    assert laid_out_for_gemm(weight) and weight.t().is_contiguous()  # (in, out) storage underneath
    assert model[2].weight.is_contiguous() and "forward" not in vars(model[2])  # not in the table: untouched
    got = model(x)
    assert got.shape == expected.shape and torch.allclose(got.float(), expected.float(), atol=2e-2, rtol=2e-2)
    assert any(key[0] == (15, 64) and key[1] == (64, 32) for key in d._fast)  # the 3-D input flattened, dispatched
    assert patch(model, d) == []  # once
    assert torch.equal(model.state_dict()["0.weight"], values)


def _layer(n, k, ratios, kernel="triton:64x64x32"):
    """A layer's entries at token counts 1, 2, ... with their F.linear ratios (`Entry.vs_linear`)."""
    return tuple(Entry(m, n, k, "bf16", kernel if i % 2 else "torch", 1.0, 1.0, r)
                 for i, (m, r) in enumerate(zip(range(1, len(ratios) + 1), ratios)))


def test_a_layer_is_relaid_only_where_the_relaid_dispatch_kept_up_with_f_linear_at_every_token_count():
    table = Table(_layer(32, 64, [1.2, 1.0, 0.99]) + _layer(48, 32, [1.3, 1.2, 0.95])  # one count 5% slower
                  + _layer(16, 16, [1.0, 1.005, 1.0])  # no gain worth a relayout
                  + _layer(8, 8, [1.5, None, 1.2])  # not every count timed against F.linear: any kernel decides
                  + _layer(4, 4, [1.0], kernel="torch"))
    assert table.relaid_layers() == {(32, 64, "bf16"), (8, 8, "bf16")}
    assert table.relaid_layers(floor=0.9) == {(32, 64, "bf16"), (48, 32, "bf16"), (8, 8, "bf16")}
    # the ratio survives the table's file
    assert Table.from_dict(table.to_dict()).relaid_layers() == table.relaid_layers()
    assert Table.from_dict({"entries": [{"m": 1, "n": 2, "k": 3, "dtype": "bf16", "kernel": "torch", "us": 1,
                                         "torch_us": 1}]}).entries[0].vs_linear is None  # tables made before it


def test_patch_leaves_a_layer_to_f_linear_where_its_relaid_dispatch_was_slower_at_some_token_count():
    model, x = _model(), torch.randn(3, 5, 64, dtype=torch.bfloat16)
    expected = model(x)
    d = Dispatcher(Table(_layer(32, 64, [1.2, 1.1]) + _layer(48, 32, [1.3, 0.9])), fastpath=False)
    assert patch(model, d) == ["0"]
    assert laid_out_for_gemm(model[0].weight) and model[2].weight.is_contiguous() and "forward" not in vars(model[2])
    assert torch.allclose(model(x).float(), expected.float(), atol=2e-2, rtol=2e-2)


def test_from_records_carries_the_f_linear_ratio_into_the_table():
    from kernelrl.gemm.table import from_records

    rec = {"m": 1, "n": 32, "k": 64, "dtype": "bf16", "best": "torch", "best_us": 2.0, "torch_us": 2.0}
    assert from_records([rec], {}).entries[0].vs_linear is None
    assert from_records([rec, {**rec, "vs_linear": 1.25}], {}).entries[0].vs_linear == 1.25


def test_unpatch_lays_the_weights_out_as_nn_linear_does_and_restores_forward():
    model = _model()
    values = model[0].weight.detach().clone()
    patch(model, _table((4, 32, 64)))
    assert unpatch(model) == ["0"]
    assert model[0].weight.is_contiguous() and torch.equal(model[0].weight, values)
    assert "forward" not in vars(model[0]) and unpatch(model) == []


def test_linear_with_a_weight_as_nn_linear_lays_it_out_is_f_linear():
    x, w, b = torch.randn(2, 7, 16), torch.randn(8, 16), torch.randn(8)
    assert not laid_out_for_gemm(w)
    assert torch.equal(linear(x, w, b), F.linear(x, w, b))
    relaid = w.t().contiguous().t()
    assert torch.allclose(linear(x, relaid, b, _table()), F.linear(x, w, b), atol=1e-5)


def test_gradients_flow_through_a_patched_layer():
    model = nn.Linear(16, 8).to(torch.bfloat16)
    d = _table((4, 8, 16))
    patch(model, d)
    x = torch.randn(4, 16, dtype=torch.bfloat16, requires_grad=True)
    model(x).float().sum().backward()
    assert x.grad is not None and model.weight.grad is not None and model.bias.grad is not None
    assert any(key[0] == (4, 16) for key in d._fast)  # the forward went through the dispatch


def test_the_dispatch_and_its_custom_op_carry_gradients_as_torch_matmul_does():
    from kernelrl.gemm.dispatch import _gemm_mm, matmul

    a, b = torch.randn(5, 7, requires_grad=True), torch.randn(7, 3, requires_grad=True)
    g = torch.randn(5, 3)
    expected = torch.autograd.grad(a @ b, (a, b), g)
    for mm in (matmul, _gemm_mm):  # eager, and the op torch.compile traces
        got = torch.autograd.grad(mm(a, b), (a, b), g)
        assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(got, expected))


@pytest.mark.gpu
@needs_cuda
def test_a_patched_mlp_matches_torch_eager_in_graphs_and_compiled():
    from kernelrl.gemm.dispatch import default_dispatcher

    names = default_dispatcher().table.lookup()
    if not any(k[3] == "bf16" for k in names):
        pytest.skip("no bf16 table for this GPU")
    (m, n, k, _), _ = next((key, v) for key, v in sorted(names.items()) if key[3] == "bf16" and key[0] >= 64)
    torch.manual_seed(0)
    model = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    exact = x.double() @ model.weight.double().t()
    torch_err = (model(x).double() - exact).norm() / exact.norm()
    assert patch(model) == [""]
    eager = model(x)
    graph, static_x = torch.cuda.CUDAGraph(), x.clone()
    with torch.cuda.graph(graph):
        static_out = model(static_x)
    graph.replay()
    compiled = torch.compile(model)(x)
    for out in (eager, static_out, compiled):
        assert (out.double() - exact).norm() / exact.norm() <= 2 * torch_err + 1e-6


def test_the_decoder_layer_benchmark_runs_and_reports_every_setting(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gemm_decoder.py"
    subprocess.run([sys.executable, str(script), str(tmp_path), "--device", "cpu", "--tiny", "--decode", "1,2",
                    "--prefill", "8", "--rounds", "1", "--replays", "1"], check=True, capture_output=True, timeout=300)
    rows = json.loads((tmp_path / "gemm_decoder.json").read_text())["rows"]
    assert [(r["mode"], r["tokens"]) for r in rows] == [("decode", 1), ("decode", 2), ("prefill", 8)]
    assert all(r["within_2x_torch_error"] and r["torch_us"] > 0 for r in rows)
    assert "| prefill | 8 |" in (tmp_path / "gemm_decoder.md").read_text()


def test_the_nt_layout_times_torch_as_f_linear_on_the_weight_and_the_others_on_its_relaid_copy():
    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.bench import _impls, columns

    class Buffers:  # an Inputs of CPU tensors: one set, B and its nn.Linear weight W = B.T
        a, b, c = [torch.randn(4, 6)], [torch.randn(6, 5)], [torch.empty(4, 5)]
        w = [b[0].t().contiguous()]

        def __len__(self):
            return 1

    inp = Buffers()
    impls = _impls(Shape(4, 5, 6), torch.float32, {"dtype": "fp32"}, _table(), "nt")
    fn, convention = impls["torch"]
    assert fn is F.linear and convention == tm.LINEAR
    assert torch.allclose(tm._call(fn, inp, 0, convention), inp.a[0] @ inp.b[0], atol=1e-5)
    assert _impls(Shape(4, 5, 6), torch.float32, {"dtype": "fp32"}, _table())["torch"] == (torch.matmul, False)
    assert _impls(Shape(4, 5, 6), torch.float32, {"dtype": "fp32"}, _table(), "nt", kept=True)["kernelrl"] == \
        (F.linear, tm.LINEAR)  # a layer patch leaves alone runs F.linear
    assert columns()[:6] == ["m", "n", "k", "layout", "weight", "dtype"]


def test_gemm_bench_refuses_an_unknown_layout_in_one_line():
    from typer.testing import CliRunner

    from kernelrl.gemm.cli import app

    r = CliRunner().invoke(app, ["bench", "--shapes", "64x64x64", "--layout", "tn"])
    assert r.exit_code == 2 and "layout 'tn': use nn or nt" in r.output


def test_gemm_show_says_which_layers_patch_lays_out(tmp_path):
    import json

    from typer.testing import CliRunner

    from kernelrl.gemm.cli import app

    path = tmp_path / "t.json"
    Table(_layer(32, 64, [1.2, 1.1]) + _layer(48, 32, [1.3, 0.9]), {"gpu": "test"}).save(path)
    r = CliRunner().invoke(app, ["show", "--table", str(path), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["relaid_layers"] == [[32, 64, "bf16"]]
    r = CliRunner().invoke(app, ["show", "--table", str(path), "--shape", "2x48x32", "--dtype", "bf16", "--json"])
    info = json.loads(r.output)
    assert r.exit_code == 0 and info["patch"] == "kept" and info["vs_linear"] == 0.9
    r = CliRunner().invoke(app, ["show", "--table", str(path), "--shape", "2x32x64", "--dtype", "bf16"])
    text = " ".join(r.output.split())  # the console wraps long lines
    assert r.exit_code == 0 and "1.100x F.linear" in text and "lays this layer out" in text
