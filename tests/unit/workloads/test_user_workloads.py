"""The user's own model, dataset and loss by import path: fingerprints, buffers, dropout, every backend, errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from autosync import api
from autosync.catalog import make_policy
from autosync.engine import simulate
from autosync.engine.drivers import InProcessDriver, PerWorkerDriver, ProcessDriver
from autosync.core.errors import JobFileError
from autosync.core.job import job_from_dict, load_job
from autosync.workloads.build import build_workload
from tests.conftest import autosync, no_traceback, per_worker_run

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

USER_PACKAGE = '''
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


def blobs(n_samples=240, n_features=6, n_classes=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_classes, n_features)) * 2
    y = rng.integers(0, n_classes, n_samples)
    return (centres[y] + rng.normal(size=(n_samples, n_features))).astype(np.float32), y


def regression(n_samples=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_samples, 4)).astype(np.float32)
    return x, (x @ np.arange(1, 5)).astype(np.float32)


def bn_dropout_mlp(input_shape, n_outputs, hidden=16, dropout=0.2):
    return nn.Sequential(nn.Linear(input_shape[0], hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Dropout(dropout), nn.Linear(hidden, n_outputs))


def bn_mlp(input_shape, n_outputs, hidden=16):
    return nn.Sequential(nn.Linear(input_shape[0], hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, n_outputs))


def bn_stateless_mlp(input_shape, n_outputs, hidden=16, centred=False):
    class Centred(nn.Module):
        def forward(self, x):
            return x - x.mean(0) if centred else x
    return nn.Sequential(nn.Linear(input_shape[0], hidden), nn.BatchNorm1d(hidden, track_running_stats=False),
                         nn.ReLU(), Centred(), nn.Linear(hidden, n_outputs))


def linear(input_shape, n_outputs):
    return nn.Linear(input_shape[0], n_outputs)


def noisy_linear(input_shape, n_outputs):
    class Noisy(nn.Linear):
        def forward(self, x):
            return super().forward(x) + 0.1 * torch.randn(len(x), self.out_features)
    return Noisy(input_shape[0], n_outputs)


def counting(input_shape, n_outputs):
    class Counting(nn.Linear):
        calls = 0
        def forward(self, x):
            Counting.calls += 1
            return super().forward(x) * Counting.calls
    return Counting(input_shape[0], n_outputs)


def batch_centred(input_shape, n_outputs):
    class Centred(nn.Linear):
        def forward(self, x):
            return super().forward(x - x.mean(0))  # each sample's output depends on the whole batch
    return Centred(input_shape[0], n_outputs)


def wrong_width(input_shape, n_outputs):
    return nn.Linear(input_shape[0], n_outputs + 2)


def not_a_module(input_shape, n_outputs):
    return "a string"


def broken(input_shape, n_outputs):
    raise RuntimeError("out of ideas")


def per_sample_loss():
    return lambda out, y: F.cross_entropy(out, y, reduction="none")


def detached_loss():
    return lambda out, y: F.cross_entropy(out.detach(), y)


def smooth(smoothing=0.1):
    return lambda out, y: F.cross_entropy(out, y, label_smoothing=smoothing)


def not_a_dataset(seed=0):
    return 42


def ragged(seed=0):
    return np.zeros((10, 3), np.float32), np.zeros(9, np.int64)


def four_arrays(seed=0):
    x, y = blobs(seed=seed)
    return x[:180], y[:180], x[180:], y[180:]


def keras_pairs(seed=0):  # the shape of keras.datasets.*.load_data()
    x, y = blobs(seed=seed)
    return (x[:180], y[:180]), (x[180:], y[180:])


def keras_pairs_of_lists(seed=0):
    x, y = blobs(seed=seed)
    return (x[:180].tolist(), y[:180].tolist()), (x[180:].tolist(), y[180:].tolist())


def keras_pairs_ragged(seed=0):
    x, y = blobs(seed=seed)
    return (x[:180], y[:179]), (x[180:], y[180:])
'''


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user")
    (root / "userpkg").mkdir()
    (root / "userpkg" / "__init__.py").write_text(textwrap.dedent(USER_PACKAGE))
    return root


def _job(user_dir: Path, name: str = "user", **workload) -> "api.JobSpec":
    data = {
        "name": name,
        "workload": {"dataset": {"factory": "userpkg:blobs"}, "model": {"factory": "userpkg:bn_dropout_mlp"},
                     "batch_size": 8, "optimizer": {"lr": 0.1, "momentum": 0.5},
                     "evaluation": {"every_seconds": 2.0}, **workload},
        "cluster": {"n_workers": 3, "round_trip": {"kind": "shifted_exponential", "alpha": 0.5}},
        "target": {"metric": "test_accuracy", "threshold": 0.95},
        "budget": {"max_updates": 12},
    }
    path = user_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_job(path)


def test_the_import_path_kwargs_and_version_enter_the_fingerprint(user_dir):
    base = _job(user_dir)
    prints = {base.fingerprint()}
    for name, change in [("k", {"model": {"factory": "userpkg:bn_dropout_mlp", "kwargs": {"hidden": 8}}}),
                         ("v", {"model": {"factory": "userpkg:bn_dropout_mlp", "version": "2"}}),
                         ("m", {"model": {"factory": "userpkg:bn_mlp"}}),
                         ("d", {"dataset": {"factory": "userpkg:blobs", "kwargs": {"n_samples": 100}}}),
                         ("l", {"loss": {"factory": "userpkg:smooth"}})]:
        prints.add(_job(user_dir, name, **change).fingerprint())
    assert len(prints) == 6
    assert _job(user_dir, "again").fingerprint() == base.fingerprint()  # the name is not part of it
    assert load_job().fingerprint() == "86edddd667e815f6"  # built-in jobs keep the fingerprints they had


def test_a_factory_next_to_a_builtin_field_or_kwargs_without_a_factory_is_refused():
    with pytest.raises(JobFileError, match=r"workload.model: factory replaces the built-in name.*'mlp'"):
        job_from_dict({"workload": {"model": {"factory": "a.b:c", "name": "mlp"}}}, "j.yaml")
    with pytest.raises(JobFileError, match=r"workload.model.factory must be an import path 'package.module:function'"):
        job_from_dict({"workload": {"model": {"factory": "a b"}}}, "j.yaml")
    with pytest.raises(JobFileError, match=r"kwargs needs factory"):
        job_from_dict({"workload": {"dataset": {"kwargs": {"x": 1}}}}, "j.yaml")
    with pytest.raises(JobFileError, match=r"workload.loss must be one of 'cross_entropy' or 'mse', but got 'hinge'"):
        job_from_dict({"workload": {"loss": "hinge"}}, "j.yaml")


def test_buffers_move_by_the_mean_of_the_workers_changes_at_a_bsp_barrier(user_dir):
    """BSP, one update: the server's buffers = initial + mean over workers of (after - before) of each pass."""
    job = _job(user_dir, "bn", model={"factory": "userpkg:bn_mlp"}).model_copy(update={"budget": job_from_dict(
        {"budget": {"max_updates": 1}}).budget})
    workload = build_workload(job)
    assert workload.n_buffer_values == 16 + 16 + 1 and not workload.fast_path
    result = simulate(job, make_policy("bsp"), workload=workload)
    start = workload.init_buffers()
    expected = start.clone()
    for w in range(3):
        x = workload.data.x_train[workload.batch_index(job.seed, w, 0, 8)]
        _, after = workload.forward(workload.init_params(), x, start)
        expected += (after - start) / 3
    assert torch.allclose(result.final_buffers, expected, atol=1e-6)
    assert result.final_buffers[-1] == 1.0  # num_batches_tracked: one update


def test_same_seed_same_run_with_buffers_and_dropout_and_seeds_differ(user_dir):
    job = _job(user_dir, "repeat")
    a, b = (simulate(job, make_policy("asp")) for _ in range(2))
    assert torch.equal(a.final_params, b.final_params) and torch.equal(a.final_buffers, b.final_buffers)
    c = simulate(job.model_copy(update={"seed": 1}), make_policy("asp"))
    assert not torch.equal(a.final_params, c.final_params)
    dropout = build_workload(job)
    assert dropout.random
    theta, x = dropout.init_params(), dropout.data.x_train[:8]
    with dropout.task_randomness(0, 1, 2):
        first, _ = dropout.forward(theta, x)
    with dropout.task_randomness(0, 1, 2):
        again, _ = dropout.forward(theta, x)
    with dropout.task_randomness(0, 1, 3):
        other, _ = dropout.forward(theta, x)
    assert torch.equal(first, again) and not torch.equal(first, other)


@pytest.mark.slow
def test_the_docs_family_robustness_and_replay_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """The second example on the Python API page: a family's jobs, a robustness report and the replay."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "reference" / "api.md").read_text()
    start = page.index("```python\nimport autosync.api as autosync\n\ndrawn")
    code = page[start + len("```python\n"): page.index("```", start + 3)]
    repo = Path(__file__).resolve().parents[3]
    work = tmp_path / "work"
    work.mkdir()
    (work / "baselines").symlink_to(repo / "baselines")
    monkeypatch.chdir(work)
    exec(compile(code, "docs/reference/api.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4  # the three online policies it names and BSP
    assert len(list((work / "jobs").glob("*.yaml"))) == 2
    assert (work / "results" / "my_family" / "robustness.md").is_file()
    assert (work / "results" / "my_replay" / "table.md").is_file()


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.parametrize("policy", ["bsp", "asp"])
def test_worker_processes_give_the_in_process_run_bit_for_bit_with_buffers_and_dropout(user_dir, policy):
    job = _job(user_dir, "procs")
    workload = build_workload(job)
    reference = per_worker_run(job, make_policy(policy), workload)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        default = simulate(job, make_policy(policy), workload=workload)  # the default driver takes the same kernel
    finally:
        torch.set_num_threads(threads)
    driver = ProcessDriver(workload, processes=2, timeout=30.0)
    real = simulate(job, make_policy(policy), workload=workload, driver=driver)
    for other in (real, default):
        assert torch.equal(other.final_params, reference.final_params)
        assert torch.equal(other.final_buffers, reference.final_buffers)
    assert not torch.equal(reference.final_buffers, workload.init_buffers())


def test_randomness_outside_dropout_modules_is_found_and_seeded(user_dir):
    workload = build_workload(_job(user_dir, "noisy", model={"factory": "userpkg:noisy_linear"}))
    assert workload.random and not workload.fast_path


def test_a_pure_user_model_keeps_the_fused_and_batched_paths(user_dir):
    job = _job(user_dir, "pure", model={"factory": "userpkg:linear"})
    workload = build_workload(job)
    assert workload.fast_path and workload.init_buffers() is None and workload.independent_samples
    result = simulate(job, make_policy("bsp"), workload=workload)
    assert result.final_buffers is None and result.metrics["updates"] == 12


def test_a_user_model_whose_samples_depend_on_each_other_is_never_fused(user_dir):
    workload = build_workload(_job(user_dir, "centred", model={"factory": "userpkg:batch_centred"}))
    assert workload.fast_path and not workload.independent_samples and not workload.norm_groups
    assert not InProcessDriver(workload, 0).fuses_workers


def test_a_user_model_coupled_only_by_batch_norm_is_fused_with_statistics_per_worker(user_dir):
    """Batch norm without running statistics computed per worker's slice makes the fused pass exact; a model
    with another coupling besides (a batch-centred layer) is found by the check and never fused."""
    job = _job(user_dir, "bn", model={"factory": "userpkg:bn_stateless_mlp"})
    workload = build_workload(job)
    assert workload.fast_path and not workload.independent_samples and workload.norm_groups
    assert InProcessDriver(workload, 0).fuses_workers
    fused = simulate(job, make_policy("bsp"), workload=workload)
    alone = simulate(job, make_policy("bsp"), workload=workload, driver=PerWorkerDriver(workload, job.seed))
    step = (alone.final_params - workload.init_params()).norm()
    assert (fused.final_params - alone.final_params).norm() < 1e-4 * step
    centred = build_workload(_job(user_dir, "bnc", model={"factory": "userpkg:bn_stateless_mlp",
                                                          "kwargs": {"centred": True}}))
    assert not centred.independent_samples and not centred.norm_groups
    assert not InProcessDriver(centred, 0).fuses_workers


def test_regression_targets_take_the_squared_error(user_dir):
    job = _job(user_dir, "reg", dataset={"factory": "userpkg:regression"}, model={"factory": "userpkg:linear"})
    job = job.model_copy(update={"target": job_from_dict({"target": {"metric": "test_loss", "threshold": 0.1}}).target})
    workload = build_workload(job)
    assert workload.regression and workload.loss.name == "mse"
    assert simulate(job, make_policy("bsp"), workload=workload).metrics["final_test_loss"] is not None


@pytest.mark.parametrize("change, message", [
    ({"model": {"factory": "nopkg.models:net"}}, r"workload.model.factory: 'nopkg.models:net' does not import: "
                                                 r"No module named 'nopkg'"),
    ({"model": {"factory": "userpkg:missing"}}, r"workload.model.factory: module 'userpkg' has no attribute 'missing'"),
    ({"model": {"factory": "userpkg:broken"}}, r"workload.model.factory: 'userpkg:broken' raised RuntimeError: "
                                               r"out of ideas"),
    ({"model": {"factory": "userpkg:linear", "kwargs": {"depth": 3}}}, r"cannot be called with kwargs \{'depth': 3\}"),
    ({"model": {"factory": "userpkg:not_a_module"}}, r"must return a torch.nn.Module, but returned a str"),
    ({"model": {"factory": "userpkg:wrong_width"}}, r"workload.model \(userpkg:wrong_width\): outputs of shape "
                                                    r"\(4, 5\) do not match the dataset's 3 classes"),
    ({"model": {"factory": "userpkg:counting"}}, r"is not a pure function of its parameters, buffers and the seeded"),
    ({"loss": {"factory": "userpkg:per_sample_loss"}}, r"workload.loss.factory: 'userpkg:per_sample_loss' must return "
                                                       r"a scalar \(the batch's mean loss\), but returned \(4,\)"),
    ({"loss": {"factory": "userpkg:detached_loss"}}, r"workload.loss.factory: the loss does not reach the model's "
                                                     r"parameters"),
    ({"dataset": {"factory": "userpkg:not_a_dataset"}}, r"workload.dataset.factory: 'userpkg:not_a_dataset' must "
                                                        r"return .* but returned a int"),
    ({"dataset": {"factory": "userpkg:ragged"}}, r"returned train inputs and targets of different lengths: 10 and 9"),
])
def test_user_code_that_cannot_train_is_one_line_naming_the_file_and_field(user_dir, change, message):
    job = _job(user_dir, "bad", **change)
    with pytest.raises(JobFileError, match=message) as caught:
        build_workload(job)
    assert str(caught.value).startswith(str(user_dir / "bad.yaml") + ": ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("factory", ["keras_pairs", "keras_pairs_of_lists"])
def test_a_dataset_factory_may_return_keras_train_and_test_pairs(user_dir, factory):
    from autosync.workloads.datasets import load_dataset

    expected = load_dataset(_job(user_dir, "four", dataset={"factory": "userpkg:four_arrays"}).workload.dataset)
    got = load_dataset(_job(user_dir, "keras", dataset={"factory": f"userpkg:{factory}"}).workload.dataset)
    for part in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(got, part), getattr(expected, part)), part
    assert got.n_classes == expected.n_classes == 3 and got.y_train.dtype == torch.int64
    with pytest.raises(JobFileError, match="returned train inputs and targets of different lengths: 180 and 179"):
        load_dataset(_job(user_dir, "keras_bad", dataset={"factory": "userpkg:keras_pairs_ragged"}).workload.dataset,
                     "keras_bad.yaml")


@pytest.mark.slow
def test_validate_and_run_report_bad_user_code_in_one_line_with_exit_2(user_dir):
    _job(user_dir, "cli_bad", model={"factory": "userpkg:wrong_width"})
    for command in (["validate", "cli_bad.yaml"], ["run", "cli_bad.yaml"], ["tune", "cli_bad.yaml", "--storage",
                                                                         f"sqlite:///{user_dir}/s.db"]):
        out = autosync(*command, cwd=user_dir)
        no_traceback(out)
        lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
        assert out.returncode == 2 and len(lines) == 1 and "do not match the dataset's 3 classes" in lines[0], out.stderr


@pytest.mark.slow
def test_the_sequence_example_is_tuned_end_to_end_from_any_directory(tmp_path):
    """The console script imports the example's own package from the job file's folder (not the cwd)."""
    job = EXAMPLES / "sequences" / "job.yaml"
    first = autosync("tune", str(job), "--storage", f"sqlite:///{tmp_path}/s.db", "--json",
                     cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    again = autosync("tune", str(job), "--storage", f"sqlite:///{tmp_path}/s.db", "--json",
                     cwd=tmp_path)
    import json

    found, cached = json.loads(first.stdout), json.loads(again.stdout)
    assert not found["cached"] and cached["cached"] and cached["cache"]["best_policy"] == found["cache"]["best_policy"]
    assert found["cache"]["best_value"] is not None


@pytest.mark.slow
def test_the_batchnorm_example_is_tuned_end_to_end_through_the_python_api(tmp_path):
    example = api.load_job(EXAMPLES / "vision_bn" / "job.yaml")
    # The example's model and data with a lower target: the same path through the API (buffers through the
    # tune, the cache and the tuned run) with shorter runs to the target. 0.4 (chance is 0.25 on its 4
    # classes) is met after about 12 virtual s where 0.5 took about 28, and the test's runs cost about half.
    job = example.model_copy(update={"target": example.target.model_copy(update={"threshold": 0.4})})
    workload = api.check_workload(job)
    assert workload.n_buffer_values > 0 and not workload.fast_path
    outcome = api.tune(job, "static_k", n_trials=1, storage=f"sqlite:///{tmp_path}/s.db")  # BSP's form, from BSP's run
    assert not outcome.cached and outcome.cache["best_value"] is not None
    assert outcome.top and all(row["reached"] == row["runs"] for row in outcome.top)
    tuned = api.run(job, "tuned", storage=f"sqlite:///{tmp_path}/s.db")
    assert tuned.policy == outcome.cache["best_policy"] and tuned.final_buffers is not None


@pytest.mark.slow
def test_the_docs_python_api_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """The example on the docs site's Python API page (docs/reference/api.md; it was the README's)."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "reference" / "api.md").read_text()
    start = page.index("```python\nimport autosync.api as autosync")
    code = page[start + len("```python\n"): page.index("```", start + 3)]
    (tmp_path / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/reference/api.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 + 3 and (tmp_path / "results" / "my_board" / "leaderboard.md").is_file()
    assert sorted(api.__all__) == sorted(name for name in api.__all__ if hasattr(api, name))


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.distributed
def test_torchrun_ranks_import_the_user_code_and_give_the_in_process_run_bit_for_bit(user_dir, tmp_path):
    import subprocess
    import sys

    job_path = user_dir / "ranks.yaml"
    job = _job(user_dir, "ranks")
    launched = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                               "-m", "autosync.cli", "run", str(job_path), "--backend", "distributed", "--policy",
                               "backup", "--param", "k=2", "--out", "v"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert launched.returncode == 0, launched.stderr[-2000:]
    reference = per_worker_run(job, make_policy("backup", {"k": 2}), build_workload(job))
    assert torch.equal(torch.load(tmp_path / "v" / "final_params.pt"), reference.final_params)
    assert torch.equal(torch.load(tmp_path / "v" / "final_buffers.pt"), reference.final_buffers)


@pytest.mark.slow
@pytest.mark.processes
def test_a_real_clock_run_with_buffers_and_dropout_reruns_bit_for_bit(user_dir):
    _job(user_dir, "realclock")
    run = autosync("run", "realclock.yaml", "--backend", "processes", "--clock", "real", "--policy", "asp",
                   "--out", "real_run", cwd=user_dir)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (user_dir / "real_run" / "final_buffers.pt").is_file()
    again = autosync("rerun", "real_run", cwd=user_dir)
    assert again.returncode == 0 and "bit-identical to the logged run" in again.stdout, again.stdout + again.stderr


def test_a_process_that_did_not_load_the_job_imports_its_code_and_its_errors_come_back_whole(tmp_path):
    """A joblib worker started before a user-code job was loaded (its search path lacks the job's folder)
    still imports the job's factories; a job-file error raised in a worker reaches the parent as itself."""
    import pickle
    import subprocess
    import sys

    (tmp_path / "mine_for_a_worker.py").write_text("def build():\n    return 41 + 1\n")
    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: x\n")
    code = ("from autosync.workloads.user_code import import_factory; "
            f"print(import_factory('mine_for_a_worker:build', 'workload.model.factory', {str(job_file)!r})())")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[3])
    assert fresh.returncode == 0 and fresh.stdout.strip() == "42", fresh.stderr
    error = JobFileError("job.yaml", ["workload.model.factory: 'm:f' does not import"])
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is JobFileError and str(again) == str(error) and again.problems == error.problems


def test_jobs_of_two_folders_naming_one_package_each_import_their_own(tmp_path):
    """`autosync validate a/job.yaml b/job.yaml`: the second job was checked against the first's package (the
    one imported already), and passed though its own dataset raises."""
    good = "import numpy as np\nfrom torch import nn\n" \
           "def data(seed=0):\n    x = np.random.default_rng(seed).normal(size=(60, 5)).astype(np.float32)\n" \
           "    return x, (x[:, 0] > 0).astype(np.int64)\n" \
           "def model(n_outputs):\n    return nn.Linear(5, n_outputs)\n"
    broken = "def data(seed=0):\n    raise RuntimeError('the second folder's data')\ndef model(n_outputs):\n" \
             "    raise RuntimeError('x')\n"
    jobs = []
    for folder, code in (("a", good), ("b", broken.replace("folder's", "folder"))):
        (tmp_path / folder / "twinpkg").mkdir(parents=True)
        (tmp_path / folder / "twinpkg" / "__init__.py").write_text(code)
        job = tmp_path / folder / "job.yaml"
        job.write_text(yaml.safe_dump({
            "name": f"twin_{folder}", "workload": {"dataset": {"factory": "twinpkg:data"},
                                                   "model": {"factory": "twinpkg:model"}, "batch_size": 8},
            "cluster": {"n_workers": 2}, "target": {"metric": "test_accuracy", "threshold": 0.9},
            "budget": {"max_updates": 4}}))
        jobs.append(job)
    load_job(jobs[0])  # both folders on the search path, a's first, before either package is imported
    with pytest.raises(JobFileError, match="the second folder data"):
        api.validate_job(jobs[1])  # it took a's package, found first on the path
    api.validate_job(jobs[0])  # and a's own, imported already as b's
    with pytest.raises(JobFileError, match="the second folder data"):
        api.validate_job(jobs[1])
    child = subprocess.run(  # a spawned process inherits the search path and which folders are jobs'
        [sys.executable, "-c", "import sys; from autosync.core.job import load_job; "
         "from autosync.workloads.user_code import import_factory; "
         f"job = load_job({str(jobs[1])!r}); print(import_factory('twinpkg:data', 'f', job.source).__module__, "
         "sys.modules['twinpkg'].__file__)"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]),
             "AUTOSYNC_IMPORT_ROOTS": os.pathsep.join([str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve())])},
        capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and child.stdout.split()[1].startswith(str((tmp_path / "b").resolve())), child


def test_a_run_of_a_job_naming_the_users_code_records_its_job_file_where_rerun_imports_it(user_dir, tmp_path):
    """`autosync rerun RUN` read the job from RUN/summary.json, and so imported its code from the run folder:
    "No module named 'userpkg'" after the run's own hint to rerun it."""
    import json

    from autosync.measure.rerun import _job_source

    job = _job(user_dir, name="recorded")
    api.run(job, "bsp").write(tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["job_file"] == str((user_dir / "recorded.yaml").resolve())
    assert _job_source(tmp_path / "r", summary) == summary["job_file"]  # the code beside it is imported
    (user_dir / "recorded.yaml").unlink()  # moved away: the summary's own copy of the job, as before
    assert _job_source(tmp_path / "r", summary) == str(tmp_path / "r" / "summary.json")
