"""Elementwise ops for benchmarks/real_corpus.py: the activation or scalar arithmetic a reference's forward ends in,
read from its AST with the constants the program is built with, as float32-accurate CUDA and Triton expressions of
each element v, and the module code of a candidate's own kernel that applies one."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from eval_throughput import CUDA_EXTENSION, TRITON_KERNEL


@dataclass(frozen=True)
class Op:
    """An elementwise op a kernel applies to each element `v`."""

    name: str
    cuda: str
    triton: str


COPY = Op("copy", "v", "v")  # the output's write, where the forward ends in no activation


def _c(x: float) -> str:
    return f"{float(x)!r}f"


def _t(x: float) -> str:
    return f"{float(x)!r}"


def _clamp(lo, hi) -> tuple[str, str]:
    cuda, triton = "v", "v"
    if lo is not None:
        cuda, triton = f"fmaxf({cuda}, {_c(lo)})", f"tl.maximum({triton}, {_t(lo)})"
    if hi is not None:
        cuda, triton = f"fminf({cuda}, {_c(hi)})", f"tl.minimum({triton}, {_t(hi)})"
    return cuda, triton


_SELU = (1.0507009873554805, 1.6732632423543772)
_GELU_TANH = ("0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))",
              "0.5 * v * (1.0 + libdevice.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))")
# op -> (parameter names in call order, defaults, builder of (cuda, triton) from the parameters)
OPS = {
    "relu": ((), {}, lambda p: ("fmaxf(v, 0.f)", "tl.maximum(v, 0.0)")),
    "relu6": ((), {}, lambda p: _clamp(0.0, 6.0)),
    "sigmoid": ((), {}, lambda p: ("1.f / (1.f + expf(-v))", "tl.sigmoid(v)")),
    "tanh": ((), {}, lambda p: ("tanhf(v)", "libdevice.tanh(v)")),
    "silu": ((), {}, lambda p: ("v / (1.f + expf(-v))", "v * tl.sigmoid(v)")),
    "mish": ((), {}, lambda p: ("v * tanhf(log1pf(expf(v)))", "v * libdevice.tanh(libdevice.log1p(tl.exp(v)))")),
    "softsign": ((), {}, lambda p: ("v / (1.f + fabsf(v))", "v / (1.0 + tl.abs(v))")),
    "hardsigmoid": ((), {}, lambda p: ("fminf(fmaxf(v + 3.f, 0.f), 6.f) / 6.f",
                                       "tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0) / 6.0")),
    "hardswish": ((), {}, lambda p: ("v * fminf(fmaxf(v + 3.f, 0.f), 6.f) / 6.f",
                                     "v * tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0) / 6.0")),
    "gelu": (("approximate",), {"approximate": "none"}, lambda p: _GELU_TANH if p["approximate"] == "tanh" else (
        "0.5f * v * (1.f + erff(v * 0.7071067811865476f))",
        "0.5 * v * (1.0 + libdevice.erf(v * 0.7071067811865476))")),
    "leaky_relu": (("negative_slope",), {"negative_slope": 0.01}, lambda p: (
        f"v > 0.f ? v : v * {_c(p['negative_slope'])}", f"tl.where(v > 0.0, v, v * {_t(p['negative_slope'])})")),
    "elu": (("alpha",), {"alpha": 1.0}, lambda p: (
        f"v > 0.f ? v : {_c(p['alpha'])} * expm1f(v)", f"tl.where(v > 0.0, v, {_t(p['alpha'])} * libdevice.expm1(v))")),
    "selu": ((), {}, lambda p: (
        f"{_c(_SELU[0])} * (v > 0.f ? v : {_c(_SELU[1])} * expm1f(v))",
        f"{_t(_SELU[0])} * tl.where(v > 0.0, v, {_t(_SELU[1])} * libdevice.expm1(v))")),
    "hardtanh": (("min_val", "max_val"), {"min_val": -1.0, "max_val": 1.0},
                 lambda p: _clamp(p["min_val"], p["max_val"])),
    "clamp": (("min", "max"), {"min": None, "max": None}, lambda p: _clamp(p["min"], p["max"])),
    "softplus": (("beta", "threshold"), {"beta": 1.0, "threshold": 20.0}, lambda p: (
        f"v * {_c(p['beta'])} > {_c(p['threshold'])} ? v : log1pf(expf(v * {_c(p['beta'])})) / {_c(p['beta'])}",
        f"tl.where(v * {_t(p['beta'])} > {_t(p['threshold'])}, v, "
        f"libdevice.log1p(tl.exp(v * {_t(p['beta'])})) / {_t(p['beta'])})")),
}
# nn module classes (as built in __init__) -> the op they apply
MODULE_OPS = {"ReLU": "relu", "ReLU6": "relu6", "Sigmoid": "sigmoid", "Tanh": "tanh", "SiLU": "silu", "Mish": "mish",
              "Softsign": "softsign", "Hardsigmoid": "hardsigmoid", "Hardswish": "hardswish", "GELU": "gelu",
              "LeakyReLU": "leaky_relu", "ELU": "elu", "SELU": "selu", "Hardtanh": "hardtanh",
              "Softplus": "softplus"}
FUNCTIONAL = re.compile(r"^(?:torch|F|nn\.functional|torch\.nn\.functional)\.(\w+)$")
METHODS = ("relu", "sigmoid", "tanh")  # activations a plain rewrite writes as tensor methods


def make_op(name: str, args: list[ast.expr], keywords: list[ast.keyword], constants: dict) -> Op | None:
    """The Op of activation `name` called with `args` (after the tensor) and `keywords` whose values are known
    (`value`); None where the name is not one, or a parameter's value is not known."""
    if name not in OPS:
        return None
    order, defaults, build = OPS[name]
    params = dict(defaults)
    try:
        if len(args) > len(order):
            return None
        params.update(zip(order, (value(a, constants) for a in args)))
        for k in keywords:
            if k.arg == "inplace":
                continue
            if k.arg not in order:
                return None
            params[k.arg] = value(k.value, constants)
    except ValueError:
        return None
    cuda, triton = build(params)
    return Op(name, cuda, triton)


_ARITHMETIC = {ast.Mult: ("mul", "*"), ast.Div: ("div", "/"), ast.Add: ("add", "+"), ast.Sub: ("sub", "-")}


def scalar_op(node: ast.BinOp, constants: dict) -> tuple[ast.expr, Op] | None:
    """(tensor operand, Op) of `t * c`, `c * t`, `t / c`, `t + c`, `c + t` or `t - c` with a known number c."""
    if type(node.op) not in _ARITHMETIC:
        return None
    name, sign = _ARITHMETIC[type(node.op)]
    for tensor, number, right in ((node.left, node.right, True), (node.right, node.left, False)):
        try:
            c = value(number, constants)
        except ValueError:
            continue
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not (right or sign in "*+"):
            continue
        return tensor, Op(name, f"v {sign} {_c(c)}", f"v {sign} {_t(c)}")
    return None


def value(node: ast.expr, constants: dict):
    """The value of a literal, or of a name or self attribute the program is built with; ValueError if unknown."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        key = ast.unparse(node)
        if key in constants:
            return constants[key]
        raise


def init_constants(tree: ast.Module, init: ast.FunctionDef | None) -> dict:
    """Values the program is built with, by name: __init__'s parameters (from get_init_inputs' literals and the
    module's literal globals, or their defaults) and the self attributes __init__ sets once, to one of them or a
    literal ('self.scale')."""
    if init is None:
        return {}
    module = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            try:
                module[n.targets[0].id] = ast.literal_eval(n.value)
            except ValueError:
                pass
    given = _init_inputs(tree)
    params = init.args.args[1:]
    defaults = dict(zip([a.arg for a in params][len(params) - len(init.args.defaults):], init.args.defaults))
    constants = {}
    for i, a in enumerate(params):
        try:
            constants[a.arg] = value(given[i], module) if i < len(given) else value(defaults[a.arg], module)
        except (ValueError, KeyError):
            continue
    sets = [n for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    targets = [ast.unparse(t) for n in sets for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
    for n in sets:
        key = ast.unparse(n.targets[0]) if isinstance(n, ast.Assign) and len(n.targets) == 1 else ""
        if key.startswith("self.") and targets.count(key) == 1:
            try:
                constants[key] = value(n.value, constants)
            except ValueError:
                continue
    return constants


def _init_inputs(tree: ast.Module) -> list[ast.expr]:
    """The elements of the list get_init_inputs returns ([] where it returns something else)."""
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_init_inputs"), None)
    ret = fn.body[-1] if fn is not None else None
    return list(ret.value.elts) if isinstance(ret, ast.Return) and isinstance(ret.value, (ast.List, ast.Tuple)) \
        else []


def modules_built(init: ast.FunctionDef | None) -> dict[str, ast.Call]:
    """self.<name> -> the nn module call that built it in __init__ (nn.ReLU(), torch.nn.GELU(...))."""
    built = {}
    for n in ast.walk(init) if init is not None else ():
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and self_attr(n.targets[0]) and \
                isinstance(n.value, ast.Call):
            built[n.targets[0].attr] = n.value
    return built


def trailing_activation(forward: ast.FunctionDef, modules: dict[str, ast.Call], constants: dict):
    """(expression, tensor argument, Op) of the activation or scalar arithmetic the forward ends in: `return
    act(e)`, or `y = act(e)` just before `return y`; (None, None, None) where there is none."""
    body = forward.body
    last = body[-1]
    if not isinstance(last, ast.Return) or last.value is None:
        return None, None, None
    call = last.value
    if isinstance(call, ast.Name) and len(body) > 1:
        prev = body[-2]
        if isinstance(prev, ast.Assign) and len(prev.targets) == 1 and isinstance(prev.targets[0], ast.Name) and \
                prev.targets[0].id == call.id:
            call = prev.value
    if isinstance(call, ast.BinOp):
        found = scalar_op(call, constants)
        return (call, *found) if found else (None, None, None)
    if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args):
        return None, None, None
    func = ast.unparse(call.func)
    if FUNCTIONAL.match(func) and call.args:
        op = make_op(FUNCTIONAL.match(func).group(1), call.args[1:], call.keywords, constants)
        return (call, call.args[0], op) if op else (None, None, None)
    if self_attr(call.func) and call.func.attr in modules and len(call.args) == 1 and not call.keywords:
        built = modules[call.func.attr]
        name = MODULE_OPS.get(ast.unparse(built.func).split(".")[-1])
        op = make_op(name, built.args, built.keywords, constants) if name else None
        return (call, call.args[0], op) if op else (None, None, None)
    if isinstance(call.func, ast.Attribute) and call.func.attr in METHODS and not call.args and not call.keywords:
        return call, call.func.value, make_op(call.func.attr, [], [], constants)
    return None, None, None


def self_attr(node) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


# Where the op is the output's write, anything but a float32 CUDA tensor is returned as it is.
_PASS = ("    if not (isinstance(x, torch.Tensor) and x.is_cuda and x.dtype == torch.float32):\n"
         "        return x\n")
_CHECK = '    assert x.is_cuda and x.dtype == torch.float32, "a float32 CUDA tensor is expected"\n'

CUDA_LAUNCH = '''def {launch}(x):
    """{what} in one CUDA pass over the elements."""
{guard}    return ext.run(x)
'''

TRITON_LAUNCH = '''def {launch}(x):
    """{what} in one Triton pass over the elements."""
{guard}    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    {kernel}[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y
'''


def kernel_code(language: str, op: Op, slug: str) -> tuple[str, str]:
    """(module code, launcher name) of `op` as a CUDA or Triton kernel named after `slug`."""
    launch, kernel = f"{op.name}_{slug}", f"{op.name}_kernel_{slug}"
    what = "the output written" if op is COPY else op.name
    guard = _PASS if op is COPY else ("" if language == "cuda" else _CHECK)
    if language == "cuda":
        code = ("import torch\nfrom torch.utils.cpp_extension import load_inline\n\n"
                + CUDA_EXTENSION.format(kernel=kernel, expr=op.cuda, ext=launch) + "\n\n"
                + CUDA_LAUNCH.format(launch=launch, what=what, guard=guard))
    else:
        libdevice = "from triton.language.extra import libdevice\n" if "libdevice" in op.triton else ""
        code = ("import torch\nimport triton\nimport triton.language as tl\n" + libdevice + "\n\n"
                + TRITON_KERNEL.format(kernel=kernel, expr=op.triton) + "\n\n"
                + TRITON_LAUNCH.format(launch=launch, what=what, guard=guard, kernel=kernel))
    return code, launch


