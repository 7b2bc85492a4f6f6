"""torch.func's gradients without torch._dynamo's import (`autosync.workloads._functorch_grad`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch._functorch import eager_transforms
from torch.func import grad, vmap

from autosync.workloads import _functorch_grad as functorch_grad


def _per_worker_gradients() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(4, 6, 5), torch.randint(0, 3, (4, 6))

    def loss(p: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(torch.func.functional_call(model, p, (xs,)), ys)

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


def test_the_replacement_gives_torchs_gradients_bit_for_bit():
    assert functorch_grad.install()
    assert eager_transforms._autograd_grad is functorch_grad._autograd_grad
    ours = _per_worker_gradients()
    eager_transforms._autograd_grad = functorch_grad._original
    try:
        torchs = _per_worker_gradients()
    finally:
        functorch_grad.install()
    assert ours.keys() == torchs.keys() and len(ours) == 4
    for name in ours:
        assert torch.equal(ours[name], torchs[name]), name
    assert any(g.abs().sum() > 0 for g in ours.values())


@pytest.mark.slow
def test_a_simulated_asynchronous_run_never_imports_torch_dynamo():
    """ASP's gradients go through the per-worker vmap kernel; torch._dynamo stays out of the process (with
    torch's own function, the first gradient imports it: the check below tells the two apart)."""
    script = """
import sys
from autosync.catalog import make_policy
from autosync.engine.simulator import Simulator
from tests.conftest import small_job
run = Simulator(small_job(budget={"max_virtual_seconds": 3}), make_policy("asp", {})).run()
assert run.trace.evals, "nothing trained"
print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "no dynamo"


def test_torchs_own_function_is_kept_once_compiled_autograd_is_loaded(monkeypatch):
    """Once code imported compiled autograd (it could enable it), torch's guarded function runs."""
    called = []
    monkeypatch.setattr(functorch_grad, "_original", lambda *args: called.append(args) or (torch.zeros(1),))
    monkeypatch.setitem(sys.modules, functorch_grad.COMPILED_AUTOGRAD, sys)
    w = torch.ones(1, requires_grad=True)
    assert functorch_grad._autograd_grad([w * 2], [w]) == (torch.zeros(1),) and len(called) == 1
