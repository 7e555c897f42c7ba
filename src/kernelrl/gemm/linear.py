"""`linear(x, weight, bias)` and `patch(model)`: the tuned GEMMs inside `nn.Linear` layers.

`nn.Linear` computes `x @ W.T` with `W` stored (out, in); the tuned kernels take B as a row-major (in, out)
matrix. So `patch` lays each known layer's weight out once as (in, out) storage and keeps `weight` as its
(out, in) transposed view: the Parameter object, its values and its shape stay the same (optimizers,
`state_dict` and `F.linear` see the layer as before) and no memory is added. The storage order decides which
kernels cuBLAS and the tuned families run, and on some layers F.linear on the (out, in) weight is the faster
at some token counts: a layer is laid out only where the table measured the dispatch on the relaid weight
within 2% of F.linear on every tuned token count and faster over them (`Table.relaid_layers`). `linear` sends a weight laid out so
through the dispatch, with `x` flattened to two dimensions (a view when `x` is contiguous); the dispatch runs
the tuned kernel where the table has one for the product's (m, n, k, dtype) and torch.mm elsewhere. Any other
weight goes to `F.linear`. `unpatch` lays the weights out as `nn.Linear` makes them and restores `forward`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernelrl.gemm.dispatch import _DTYPES, Dispatcher, default_dispatcher, matmul

_ORIGINAL = "_kernelrl_gemm_patched"  # set on a patched module


def laid_out_for_gemm(weight: torch.Tensor) -> bool:
    """Whether `weight` (out, in) is the transposed view of row-major (in, out) storage, as `patch` leaves it."""
    return weight.dim() == 2 and weight.stride() == (1, weight.shape[0]) and weight.shape[0] > 1


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           dispatcher: Dispatcher | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, through the tuned kernels when `weight` is laid out as `patch` leaves it.

    `dispatcher` defaults to the committed table of this GPU (the one `kernelrl.gemm.matmul` uses)."""
    if not (laid_out_for_gemm(weight) and x.dim() >= 2 and x.shape[-1] == weight.shape[1]
            and x.dtype == weight.dtype and x.device == weight.device):
        return F.linear(x, weight, bias)
    x2 = x.reshape(-1, x.shape[-1])
    out = matmul(x2, weight.t(), dispatcher)
    if bias is not None:
        out = out + bias if torch.is_grad_enabled() and (out.requires_grad or bias.requires_grad) \
            else out.add_(bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def patch(model: nn.Module, dispatcher: Dispatcher | None = None) -> list[str]:
    """Route every `nn.Linear` of `model` whose (out, in, dtype) the table lays out for its kernels
    (`Table.relaid_layers`: measured faster than F.linear over the tuned token counts) through `linear`; return
    the names of the modules patched. Others keep `nn.Linear.forward`. Without `dispatcher`, only layers on a
    CUDA device are patched, against the committed table of this GPU."""
    d = dispatcher or default_dispatcher()
    known = d.table.relaid_layers()
    done = []
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear) or hasattr(mod, _ORIGINAL):
            continue
        w = mod.weight
        if (w.shape[0], w.shape[1], _DTYPES.get(w.dtype)) not in known or (dispatcher is None and not w.is_cuda):
            continue
        with torch.no_grad():
            w.data = w.data.t().contiguous().t()
        setattr(mod, _ORIGINAL, True)
        mod.forward = _patched_forward(mod, dispatcher)
        done.append(name)
    return done


def unpatch(model: nn.Module) -> list[str]:
    """Undo `patch`: weights laid out (out, in) again and `nn.Linear.forward` back; return the modules undone."""
    done = []
    for name, mod in model.named_modules():
        if not hasattr(mod, _ORIGINAL):
            continue
        with torch.no_grad():
            mod.weight.data = mod.weight.data.contiguous()
        del mod.forward
        delattr(mod, _ORIGINAL)
        done.append(name)
    return done


def _patched_forward(mod: nn.Linear, dispatcher: Dispatcher | None):
    def forward(x: torch.Tensor) -> torch.Tensor:
        return linear(x, mod.weight, mod.bias, dispatcher)

    return forward
