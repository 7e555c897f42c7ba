"""The dispatch's C++ hot path (`kernelrl/gemm/fastpath.cpp`), built against the installed torch: what it holds
after a signature's first call, what it leaves to Python, and each kind of entry driven through C callbacks
(on the CPU; `test_gemm_gpu.py` runs it with the real kernels)."""
import ctypes
import gc
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode

from kernelrl.gemm import fastpath
from kernelrl.gemm.dispatch import Dispatcher
from kernelrl.gemm.table import Entry, Table

PLAN_RUN = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 5)
_i, _vp = ctypes.c_int, ctypes.c_void_p
CLUSTER_RUN = ctypes.CFUNCTYPE(_i, _vp, _vp, _vp, _i, _i, _i, _i, _i, _vp, _vp, _i, _vp)


def _dispatcher(mod):
    return Dispatcher(Table((Entry(128, 64, 64, "fp16", "triton:64x64x64_s6_w4", 1.0, 1.0),)), fastpath=mod)


def test_a_first_call_adds_two_matrices_to_the_table_and_nothing_else(fastpath_module):
    d = _dispatcher(fastpath_module)
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    assert d._native.kind_of(a, b) is None
    assert torch.equal(d(a, b), a @ b)
    assert d._native.kind_of(a, b) == "mm"
    assert d._native.kind_of(torch.randn(5, 7, dtype=torch.float64), b) is None  # another signature
    d(torch.randn(2, 5, 7), b)  # a batch: Python's
    assert len(d._native) == 1
    # tuned shapes off the GPU run torch.mm as well
    x, y = torch.randn(128, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    assert torch.equal(d(x, y), x @ y) and d._native.kind_of(x, y) == "mm"


def test_subclasses_and_torch_function_modes_are_answered_in_python(fastpath_module):
    d = _dispatcher(fastpath_module)
    seen = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func.__name__)
            return super().__torch_function__(func, types, args, kwargs or {})

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(f"mode:{func.__name__}")
            return func(*args, **(kwargs or {}))

    a, b = torch.randn(5, 7), torch.randn(7, 3)
    d(a, b)  # the plain signature is in the table now
    out = d(a.as_subclass(Logged), b)
    assert "mm" in seen and type(out) is Logged
    seen.clear()
    with Mode():
        d(a, b)
    assert "mode:mm" in seen
    assert torch.equal(d(torch.nn.Parameter(a), b), a @ b)  # parameters are plain tensors to C++


def test_a_matmul_outliving_its_dispatcher_says_so_and_holds_no_cycle(fastpath_module):
    d = _dispatcher(fastpath_module)
    alive = weakref.ref(d)
    f = d.matmul
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    f(a, b)
    del d
    gc.collect()
    assert alive() is None
    assert torch.equal(f(a, b), a @ b)  # a signature already in the table needs no dispatcher
    with pytest.raises(RuntimeError, match="no longer exists"):
        f(torch.randn(4, 7), b)


def test_the_module_name_belongs_to_one_source_and_torch(monkeypatch):
    name = fastpath.module_name()
    monkeypatch.setattr(torch, "__version__", "0.0.0+other")
    assert fastpath.module_name() != name
    monkeypatch.undo()
    monkeypatch.setenv("KERNELRL_GEMM_FASTPATH", "0")
    fastpath.load.cache_clear()
    try:
        assert fastpath.load() is None
        assert not Dispatcher(Table((), {})).uses_fastpath
    finally:
        monkeypatch.undo()
        fastpath.load.cache_clear()


def test_a_python_launcher_gets_a_new_output_of_the_tuned_size(fastpath_module):
    t = fastpath_module.Table()
    calls = []

    def fn(a, b, c):
        calls.append(c.shape)
        torch.mm(a, b, out=c)

    f = fastpath_module.caller(t, lambda a, b: pytest.fail("the table holds this signature"))
    a, b = torch.randn(6, 4), torch.randn(4, 5)
    t.add_python(a, b, fn, 6, 5)
    assert torch.allclose(f(a, b), a @ b) and calls == [torch.Size([6, 5])]
    # inputs a launcher cannot take (not contiguous, or recording gradients) run torch.mm instead
    bt = b.t().contiguous().t()
    assert torch.equal(f(a, bt), torch.mm(a, bt))
    g = torch.randn(6, 4, requires_grad=True)
    h = g.detach().clone().requires_grad_()
    f(g, b).sum().backward()
    torch.mm(h, b).sum().backward()
    # bit for bit torch.mm's own gradient: a closed form such as b.sum(1) rounds in another order, and where a
    # row of b sums to nearly zero that rounding alone exceeds allclose's relative tolerance
    assert torch.equal(g.grad, h.grad) and len(calls) == 1

    def broken(a, b, c):
        raise ValueError("the launcher's own error")

    t.add_python(a, b, broken, 6, 5)
    with pytest.raises(ValueError, match="the launcher's own error"):
        f(a, b)


def test_a_plan_entry_calls_the_native_run_with_the_plan_of_the_stream(fastpath_module):
    t = fastpath_module.Table()
    runs, plans = [], {}

    @PLAN_RUN
    def run_plan(plan, a, b, c, stream):
        runs.append((plan, a, b, c, stream))
        return 7 if plan == 99 else 0

    def launcher(a, b, c):  # what plan_launcher does on a stream it has not seen: make the stream's plan
        plans[0] = (41, None)

    def failing(a, b, c):
        raise RuntimeError("no plan for this stream")

    f = fastpath_module.caller(t, lambda a, b: pytest.fail("the table holds this signature"))
    a, b = torch.randn(6, 4), torch.randn(4, 5)
    addr = ctypes.cast(run_plan, ctypes.c_void_p).value
    t.add_native(a, b, failing, 6, 5, "plan", addr, plans, [], "test plan")
    with pytest.raises(RuntimeError, match="no plan for this stream"):
        f(a, b)  # a launcher that fails to prepare the stream: its error, and nothing learned
    assert t.streams_of(a, b) == 0 and runs == []
    t.add_native(a, b, launcher, 6, 5, "plan", addr, plans, [], "test plan")
    c = f(a, b)  # the stream is new: through the launcher, which makes the plan the entry then learns
    assert runs == [] and t.streams_of(a, b) == 1 and c.shape == (6, 5)
    c = f(a, b)
    assert runs == [(41, a.data_ptr(), b.data_ptr(), c.data_ptr(), None)]
    plans[0] = (99, None)  # a failing plan, learned when the entry is added
    t.add_native(a, b, launcher, 6, 5, "plan", addr, plans, [], "test plan")
    with pytest.raises(RuntimeError, match="test plan failed with status 7"):
        f(a, b)


def test_a_cluster_entry_passes_its_fixed_arguments(fastpath_module):
    t = fastpath_module.Table()
    runs = []

    @CLUSTER_RUN
    def run(a, b, c, m, n, k, splits, groups, ws, cnt, bf16, stream):
        runs.append((m, n, k, splits, groups, ws, cnt, bf16))
        return 0

    f = fastpath_module.caller(t, lambda a, b: pytest.fail("the table holds this signature"))
    a, b = torch.randn(6, 4), torch.randn(4, 5)
    addr = ctypes.cast(run, ctypes.c_void_p).value
    t.add_native(a, b, None, 6, 5, "clusterk", addr, None, [4, 2, 1, 0], "test cluster")
    f(a, b)
    t.add_native(a, b, None, 6, 5, "clusterk", addr, {0: (1024, 2048, None)}, [4, 2, 3, 1], "test cluster")
    f(a, b)
    assert runs == [(6, 5, 4, 2, 1, None, None, 0), (6, 5, 4, 2, 3, 1024, 2048, 1)]
    with pytest.raises(ValueError, match="k, splits, groups, bf16"):
        t.add_native(a, b, None, 6, 5, "clusterk", addr, None, [4], "x")
    with pytest.raises(ValueError, match="native kind"):
        t.add_native(a, b, None, 6, 5, "other", addr, None, [], "x")
