"""torch.func's gradients without the import of torch._dynamo that their first call pays in each process.

`torch.func.grad` (and `vmap` over it, the simulator's per-worker kernel) ends in
`torch._functorch.eager_transforms._autograd_grad`, which wraps its `torch.autograd.grad` call in
`torch._dynamo.compiled_autograd._disable()`. So the first gradient of every process imports torch._dynamo:
measured 1.2 to 1.8 s of an idle 2-core machine, 4.1 s at load 6.6, paid again by every `autosync` command,
every trial helper and every worker process. The context only matters once compiled autograd is enabled,
which only code that imported `torch._dynamo.compiled_autograd` can do.

`install()` puts in its place a function that makes the same `torch.autograd.grad` call while that module is
not loaded, and calls torch's own once it is: the same gradients, bit for bit
(tests/unit/workloads/test_functorch_grad.py). Where torch's function no longer has the parameters it was
written against (another torch), nothing is replaced and the import is paid as before.
"""

from __future__ import annotations

import inspect
import sys
from typing import Sequence

import torch
from torch._functorch import eager_transforms

COMPILED_AUTOGRAD = "torch._dynamo.compiled_autograd"  # only code that imported it can enable what it disables
PARAMETERS = ["outputs", "inputs", "grad_outputs", "retain_graph", "create_graph"]  # torch 2.14's signature
_original = eager_transforms._autograd_grad


def _autograd_grad(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
                   grad_outputs: Sequence[torch.Tensor] | None = None, retain_graph: bool = False,
                   create_graph: bool = True) -> tuple[torch.Tensor, ...]:
    """torch's `_autograd_grad`, without its compiled-autograd guard while compiled autograd cannot be on."""
    if COMPILED_AUTOGRAD in sys.modules:
        return _original(outputs, inputs, grad_outputs, retain_graph, create_graph)
    if grad_outputs is None:
        diff_outputs = tuple(out for out in outputs if out.requires_grad)
    else:
        pairs = tuple((out, go) for out, go in zip(outputs, grad_outputs) if out.requires_grad)
        diff_outputs, grad_outputs = tuple(zip(*pairs)) if pairs else ((), ())
    if len(diff_outputs) == 0:
        return tuple(torch.zeros_like(inp) for inp in inputs)
    grad_inputs = torch.autograd.grad(diff_outputs, inputs, grad_outputs, retain_graph=retain_graph,
                                      create_graph=create_graph, allow_unused=True)
    return tuple(torch.zeros_like(inp) if gi is None else gi for gi, inp in zip(grad_inputs, inputs))


def install() -> bool:
    """Replace torch's `_autograd_grad` by `_autograd_grad` above where its parameters are the expected ones;
    whether it is (now) replaced."""
    if eager_transforms._autograd_grad is _autograd_grad:
        return True
    if list(inspect.signature(_original).parameters) != PARAMETERS:
        return False
    eager_transforms._autograd_grad = _autograd_grad
    return True
