"""Datasets, models, the flat-parameter loss and the in-process driver's two kernels."""

from __future__ import annotations

import pytest
import torch

from autosync.engine.drivers import InProcessDriver
from autosync.core.errors import UserError
from autosync.core.job import DatasetSpec, LRScheduleSpec, ModelSpec
from autosync.policies import Task
from autosync.workloads.datasets import load_dataset
from autosync.workloads.models import build_model, max_pool_2x2
from autosync.workloads.workload import Workload, lr_factor
from tests.conftest import fused_and_mean_gradient, small_job


def test_digits_is_embedded_and_split_deterministically():
    a, b = load_dataset(DatasetSpec(name="digits")), load_dataset(DatasetSpec(name="digits"))
    assert a.input_shape == (1, 8, 8) and a.n_classes == 10
    assert a.n_train + len(a.y_test) == 1797 and torch.equal(a.y_test, b.y_test)


def test_synthetic_datasets_are_seeded():
    spec = DatasetSpec(name="synthetic_regression", n_samples=100, n_features=5)
    a, b = load_dataset(spec), load_dataset(spec)
    assert a.n_classes is None and torch.equal(a.x_train, b.x_train)
    c = load_dataset(spec.model_copy(update={"seed": 1}))
    assert not torch.equal(a.x_train, c.x_train)


def test_torchvision_dataset_missing_names_files_and_flag(tmp_path):
    spec = DatasetSpec(name="cifar10", root=str(tmp_path))
    with pytest.raises(UserError, match=r"missing cifar-10-batches-py/data_batch_1.*download: true"):
        load_dataset(spec)


@pytest.mark.parametrize("name, shape", [
    ("logreg", (1, 8, 8)), ("mlp", (1, 8, 8)), ("cnn", (1, 8, 8)), ("cnn", (1, 28, 28)),
    ("resnet20", (3, 32, 32)), ("resnet32", (3, 32, 32)), ("resnet18", (3, 32, 32)), ("resnet18", (1, 28, 28)),
])
def test_models_build_for_their_inputs(name, shape):
    model = build_model(ModelSpec(name=name), shape, 10)
    assert model(torch.randn(2, *shape)).shape == (2, 10)


@pytest.mark.parametrize("shape", [(360, 8, 8, 8), (5, 16, 7, 9)])
def test_the_evaluations_pooling_gives_the_training_kernels_values_ties_and_nans_included(shape):
    """The CNN's evaluation pools on a channels-last copy (`max_pool_2x2`): every value as torch's
    channels-first kernel gives it, with the blank regions' ties, a NaN and odd sizes, in the caller's
    layout; with gradients on it is that kernel."""
    x = torch.relu(torch.randn(shape, generator=torch.Generator().manual_seed(0)))
    x[:, :, :4, :4] = 0.5  # tied windows, as where padding meets a blank border
    x[0, 0, 1, 1] = float("nan")
    with torch.no_grad():
        pooled = max_pool_2x2(x)
    expected = torch.nn.functional.max_pool2d(x, 2)
    assert torch.equal(pooled.isnan(), expected.isnan()) and bool(pooled.isnan().any())
    assert torch.equal(pooled.nan_to_num(), expected.nan_to_num()) and pooled.is_contiguous()
    trained = x.clone().requires_grad_()
    max_pool_2x2(trained).sum().backward()
    reference = x.clone().requires_grad_()
    torch.nn.functional.max_pool2d(reference, 2).sum().backward()
    assert torch.equal(trained.grad, reference.grad)


def test_resnet_depths():
    count = lambda m: sum(isinstance(x, torch.nn.Conv2d) for x in m.modules())
    assert count(build_model(ModelSpec(name="resnet20"), (3, 32, 32), 10)) == 19
    assert count(build_model(ModelSpec(name="resnet32"), (3, 32, 32), 10)) == 31


def test_lr_schedules():
    assert lr_factor(LRScheduleSpec(kind="constant", warmup_epochs=2), 1.0, None) == pytest.approx(0.5)
    dana_warmup = LRScheduleSpec(warmup_epochs=5, warmup_from="lr_over_n")
    assert lr_factor(dana_warmup, 0.0, None, n_workers=8) == pytest.approx(1 / 8)
    assert lr_factor(dana_warmup, 2.5, None, n_workers=8) == pytest.approx((1 / 8 + 1) / 2)
    assert lr_factor(LRScheduleSpec(kind="step", step_epochs=3, gamma=0.5), 7.0, None) == pytest.approx(0.25)
    assert lr_factor(LRScheduleSpec(kind="cosine", total_epochs=10), 5.0, None) == pytest.approx(0.5)
    assert lr_factor(LRScheduleSpec(kind="cosine"), 10.0, 10.0) == pytest.approx(0.0)


def test_batches_are_a_pure_function_of_seed_worker_task():
    w = Workload(small_job())
    assert (w.batch(0, 1, 2, 16) == w.batch(0, 1, 2, 16)).all()
    assert not (w.batch(0, 1, 2, 16) == w.batch(0, 2, 2, 16)).all()
    assert len(set(w.batch(0, 1, 2, 16).tolist())) == 16  # no repeats inside a batch


@pytest.fixture
def driver():
    job = small_job(workload__model={"name": "mlp", "hidden": [8]})
    workload = Workload(job)
    return InProcessDriver(workload, seed=0), workload


def test_fused_aggregate_equals_weighted_mean_of_worker_gradients(driver):
    drv, workload = driver
    theta = workload.init_params()
    sizes, weights = [16, 8, 24], [0.2, 0.3, 0.5]
    fused = [Task(w, 0, 0, b, 0.0, params=theta) for w, b in enumerate(sizes)]
    agg, losses = drv.aggregate(fused, weights)
    single = [Task(w, 0, 0, b, 0.0, params=theta) for w, b in enumerate(sizes)]
    drv.worker_gradients(single)
    expected = sum(w * t.gradient for w, t in zip(weights, single))
    assert torch.allclose(agg, expected, atol=1e-6)
    assert losses == pytest.approx([t.loss for t in single], rel=1e-5)


def test_vmap_over_versions_equals_one_by_one(driver):
    drv, workload = driver
    thetas = [workload.init_params() + 0.1 * i for i in range(3)]
    batched = [Task(w, 1, w, 16, 0.0, params=thetas[w]) for w in range(3)]
    drv.worker_gradients(batched)
    for w in range(3):
        alone = Task(w, 1, w, 16, 0.0, params=thetas[w])
        g, _ = drv.aggregate([alone], [1.0])
        assert torch.allclose(batched[w].gradient, g, atol=1e-6)


@pytest.mark.slow
def test_digits_are_read_without_importing_sklearn_and_equal_its_loader():
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from autosync.workloads.datasets import digits_arrays

    data, target = digits_arrays()
    bunch = load_digits()
    assert np.array_equal(data, bunch.data) and np.array_equal(target, bunch.target)
    probe = ("import sys; from autosync.workloads.datasets import digits_arrays; digits_arrays(); "
             "print('sklearn' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.parametrize("policy, params", [("bsp", {}), ("lbbsp", {})])
def test_batch_norm_workers_are_fused_with_statistics_per_worker(policy, params):
    """Batch norm normalises over the batch it is given: a BSP step over the union of the workers' batches
    is not the mean of their own gradients (122% of the step apart on this job), so the fused pass
    normalises each worker's slice by its own statistics; unequal batches (LB-BSP) take each worker's pass."""
    from autosync.catalog import make_policy
    from autosync.engine.drivers import PerWorkerDriver
    from autosync.engine.simulator import simulate

    job = small_job(workload={"dataset": {"name": "synthetic_images", "n_samples": 64, "image_shape": [3, 8, 8]},
                              "model": {"name": "resnet20"}, "batch_size": 4,
                              "evaluation": {"every_seconds": 1e9, "max_samples": 8}},
                    budget={"max_updates": 3})
    workload = Workload(job)
    assert workload.fast_path and not workload.independent_samples and workload.norm_groups
    assert InProcessDriver(workload, job.seed).fuses_workers
    run = simulate(job, make_policy(policy, params), workload=workload)
    alone = simulate(job, make_policy(policy, params), workload=workload, driver=PerWorkerDriver(workload, job.seed))
    step = (alone.final_params - workload.init_params()).norm()
    assert (run.final_params - alone.final_params).norm() < 1e-4 * step


def test_a_fused_pass_with_batch_norm_per_worker_is_the_mean_of_the_workers_gradients():
    fused, mean, losses, own = fused_and_mean_gradient()
    assert torch.allclose(fused, mean, rtol=1e-4, atol=1e-6 * float(mean.abs().max()))
    assert losses == pytest.approx(own, rel=1e-5)


def test_squared_error_on_class_labels_trains_under_per_sample_gradients_and_matches_its_one_hot_form():
    """A classification job with `loss: mse` compares its outputs with the labels' one-hot encoding; the
    encoding is built without reading the labels' values, so that ASP's per-sample gradients (vmap) run."""
    from autosync.catalog import make_policy
    from autosync.engine import simulate
    from autosync.workloads.losses import squared_error

    outputs, labels = torch.randn(5, 3), torch.tensor([0, 2, 1, 2, 0])
    expected = ((outputs - torch.nn.functional.one_hot(labels, 3).float()) ** 2).mean(dim=1)
    assert torch.allclose(squared_error(outputs, labels), expected)
    job = small_job(workload__loss="mse", budget={"max_updates": 12})
    run = simulate(job, make_policy("asp", {"lr_rule": "sqrt_staleness"}))
    assert run.status == "completed" and run.metrics["updates"] == 12
