"""`matmul(a, b)`: each known shape goes to its tuned kernel, everything else to torch.matmul (two matrices
straight to torch.mm, which is what torch.matmul calls for them).

The hot path is a lookup, one output allocation and one launch: in C++ where the extension is built
(`fastpath`: torch.mm, native launches and the output's allocation without Python), else in Python. A
signature's first call decides in Python and adds it to both. Launchers are built on a shape's first call
(warm up before CUDA-graph capture: `warmup(shapes)`); under torch.compile the call goes through the custom op
`kernelrl::gemm_mm`.
"""
from __future__ import annotations

import threading
import warnings
import weakref

import torch

from kernelrl.gemm.table import DEFAULT_TABLE, Table, table_path_for

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_TORCH = object()  # marker: this call falls back to torch.matmul
_MM = object()  # marker: a product of two matrices that falls back, through torch.mm (what torch.matmul calls)
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # what the C++ hot path takes (subclasses stay in Python)


def _fastpath_module():
    from kernelrl.gemm import fastpath

    try:
        return fastpath.load()
    except (ImportError, OSError) as e:  # built for another torch under the same name, or broken: stay correct
        warnings.warn(f"kernelrl.gemm: the C++ fast path did not load ({e}); dispatching in Python",
                      RuntimeWarning, stacklevel=3)
        return None


class Dispatcher:
    """Holds the tuned table and the launchers built from it. `matmul(a, b)` (or calling the dispatcher) is
    A @ B. `fastpath`: True takes the C++ hot path where it is built (`fastpath.load`), False answers every
    call in Python, a module is the extension to use (`fastpath.build`'s)."""

    def __init__(self, table: Table, fastpath=True):
        self.table = table
        self._names = table.lookup()
        self._launchers: dict[tuple, object] = {}
        self._fast: dict[tuple, object] = {}  # exact call signature -> what it runs (`_learn`)
        self._lock = threading.Lock()
        mod = _fastpath_module() if fastpath is True else (fastpath or None)
        self._native = mod.Table() if mod is not None else None
        if mod is None:
            self.matmul = self._python
        else:  # the C++ caller answers known signatures and hands the rest to `_python`
            self.matmul = mod.caller(self._native, _python_of(weakref.ref(self)))

    @property
    def uses_fastpath(self) -> bool:
        return self._native is not None

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.matmul(a, b)

    def kernel_for(self, m: int, n: int, k: int, dtype: torch.dtype) -> str:
        """Name of the kernel a call of this shape runs (`torch` for the fallback)."""
        return self._names.get((m, n, k, _DTYPES.get(dtype, "")), "torch")

    def _resolve(self, key: tuple):
        m, n, k, dtype, dev = key
        name = self.kernel_for(m, n, k, dtype)
        fn = _TORCH
        if name != "torch":
            from kernelrl.gemm.registry import make_launcher

            try:
                with torch.cuda.device(dev):
                    fn = make_launcher(name, m, n, k, dtype, dev)
            except Exception as e:  # a missing library or a kernel this GPU cannot run: stay correct
                warnings.warn(f"kernelrl.gemm: {name} unavailable for {m}x{n}x{k} ({e}); using torch.matmul",
                              RuntimeWarning, stacklevel=3)
        with self._lock:
            self._launchers[key] = fn
        return fn

    def _python(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # The hot path without the extension (and the C++ one's first calls): one dictionary lookup keyed on
        # everything that decides the kernel, then the checks a launcher needs (contiguous, 16-byte aligned for
        # TMA, no autograd), one allocation, one launch.
        key = (a.shape, b.shape, a.dtype, b.dtype, a.device, b.device)
        hit = self._fast.get(key)
        if hit is None:
            hit = self._learn(a, b, key)
        if hit is _MM:  # torch.mm directly: one dispatch less than torch.matmul, the same kernel
            return torch.mm(a, b)
        if hit is _TORCH:
            return torch.matmul(a, b)
        fn, m, n = hit
        if (a.is_contiguous() and b.is_contiguous() and not (a.data_ptr() & 15) and not (b.data_ptr() & 15)
                and not ((a.requires_grad or b.requires_grad) and torch.is_grad_enabled())):
            c = a.new_empty(m, n)  # the sizes as two ints: cheaper to parse than a tuple
            fn(a, b, c)
            return c
        return torch.mm(a, b)

    def _learn(self, a: torch.Tensor, b: torch.Tensor, key: tuple):
        """First call with this signature: decide between a tuned launcher and torch.matmul, and remember
        (`_TORCH`, `_MM`, or the launcher with the output's rows and columns)."""
        hit = _TORCH
        if a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]:
            hit = _MM
            if a.is_cuda and a.dtype in _DTYPES and b.dtype == a.dtype and b.device == a.device:
                m, k = a.shape
                n = b.shape[1]
                lkey = (m, n, k, a.dtype, a.device.index)
                fn = self._launchers.get(lkey) or self._resolve(lkey)
                if fn is not _TORCH:
                    hit = (fn, m, n)
        with self._lock:
            if len(self._fast) > 65536:  # many distinct signatures: forget rather than grow without bound
                self._fast.clear()
                if self._native is not None:
                    self._native.clear()
            self._fast[key] = hit
            if self._native is not None and hit is not _TORCH and type(a) in _PLAIN and type(b) in _PLAIN:
                if hit is _MM:
                    self._native.add_mm(a, b)
                elif getattr(hit[0], "native", None) is not None:
                    self._native.add_native(a, b, *hit, *hit[0].native)
                else:
                    self._native.add_python(a, b, *hit)
        return hit


def _python_of(ref: weakref.ref):
    """The dispatcher's Python call, holding it weakly (its C++ caller is its own attribute: no cycle)."""
    def fallback(a, b):
        d = ref()
        if d is None:
            raise RuntimeError("kernelrl.gemm: the Dispatcher of this matmul no longer exists; keep the Dispatcher")
        return d._python(a, b)

    return fallback


_default: Dispatcher | None = None


def default_dispatcher() -> Dispatcher:
    """The dispatcher of the committed table of this GPU (`table.table_path_for`; loaded once). A GPU without
    one, or a table whose cuBLASLt algorithms belong to another cuBLASLt, sends those products to torch.matmul,
    and says so once. Without CUDA: the H200 table, whose lookups the CPU's products never reach."""
    global _default
    if _default is None:
        _default = Dispatcher(device_table())
    return _default


def device_table() -> Table:
    """The committed table that fits the current GPU (empty, with a warning, when none does)."""
    if not torch.cuda.is_available():
        return Table.load(DEFAULT_TABLE)
    name, capability = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
    path = table_path_for(name, capability)
    if path is None or not path.is_file():
        why = "no table is tuned for it" if path is None else f"its table {path.name} is not tuned yet"
        warnings.warn(f"kernelrl.gemm: {name} (sm_{capability[0]}{capability[1]}): {why}; every product goes to "
                      "torch.matmul", RuntimeWarning, stacklevel=3)
        return Table()
    table = Table.load(path)
    if table.meta.get("cublaslt_version") is not None:
        try:
            from kernelrl.gemm import cublaslt

            if cublaslt.version() != table.meta["cublaslt_version"]:
                table = table.without_family("cublaslt")  # algorithm blobs belong to one version
        except (OSError, FileNotFoundError):
            table = table.without_family("cublaslt")
    return table


def set_table(table: Table) -> None:
    """Use `table` instead of the committed one (e.g. a freshly tuned table)."""
    global _default
    _default = Dispatcher(table)


@torch.library.custom_op("kernelrl::gemm_mm", mutates_args=())
def _gemm_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return default_dispatcher().matmul(a, b)


@_gemm_mm.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


def _save_operands(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _gemm_mm_backward(ctx, grad):
    """dA = dC @ B.T and dB = A.T @ dC, by torch.matmul (the tuned kernels cover the forward layout)."""
    a, b = ctx.saved_tensors
    return (grad @ b.t() if ctx.needs_input_grad[0] else None,
            a.t() @ grad if ctx.needs_input_grad[1] else None)


_gemm_mm.register_autograd(_gemm_mm_backward, setup_context=_save_operands)


class _WithGrad(torch.autograd.Function):
    """`dispatcher.matmul(a, b)` in eager mode where an operand requires gradients (a tuned kernel's output has
    no autograd history of its own)."""

    @staticmethod
    def forward(ctx, a, b, dispatcher):
        ctx.save_for_backward(a, b)
        return dispatcher.matmul(a, b)

    @staticmethod
    def backward(ctx, grad):
        return (*_gemm_mm_backward(ctx, grad), None)


_is_compiling = torch.compiler.is_compiling


def matmul(a: torch.Tensor, b: torch.Tensor, dispatcher: Dispatcher | None = None) -> torch.Tensor:
    """A @ B for 2-D tensors: the tuned kernel for known fp16/bf16 CUDA shapes, else torch.matmul; `dispatcher`
    defaults to the committed table of this GPU. Gradients flow where an operand requires them (the backward
    products run on torch.matmul)."""
    if dispatcher is None and _is_compiling():
        return _gemm_mm(a, b)
    d = dispatcher or _default or default_dispatcher()
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _WithGrad.apply(a, b, d)
    return d.matmul(a, b)


def warmup(shapes, dtype=torch.float16) -> None:
    """Build (and compile) the launchers of `shapes` now, e.g. before CUDA-graph capture."""
    for s in shapes:
        a = torch.randn(s.m, s.k, device="cuda", dtype=dtype)
        b = torch.randn(s.k, s.n, device="cuda", dtype=dtype)
        matmul(a, b)
    torch.cuda.synchronize()
