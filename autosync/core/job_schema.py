"""The job file's schema: JobSpec, the validated description of one training job (workload, cluster,
target, budget), and the specs it is made of, each with its rules, defaults and the checks between fields.

Reading a job file is `autosync.core.job`'s (which re-exports these names); validating one imports neither
torch, optuna nor cvxpy, so ``autosync validate`` and ``autosync --help`` stay fast.
"""

from __future__ import annotations

import json
import math
import typing
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag, ValidationInfo,
                      field_validator, model_validator)
from pydantic_core import PydanticCustomError

from autosync.core.fingerprint import fingerprint
from autosync.core.limits import MAX_NAME, MAX_SEED, MAX_SIZE


class _Spec(BaseModel):
    """Base of every spec: unknown keys are errors, values are checked on assignment too, and a float is
    finite (NaN and infinity are refused) unless its field says that infinity means something."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _a_boolean_is_not_a_number(cls, data: Any) -> Any:
        """`n_workers: true` is refused: pydantic would read it as 1, a value the user never wrote."""
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if isinstance(value, bool) and field is not None and _wants_number(field.annotation):
                    raise PydanticCustomError("bool_not_number", "must be a number, not true or false",
                                              {"field": key, "value": value})
        return data


def _wants_number(annotation: Any) -> bool:
    """Whether a field's type takes numbers and not booleans (int, float, or either in an Optional)."""
    if annotation in (int, float):
        return True
    args = typing.get_args(annotation)
    return bool(args) and bool not in args and any(_wants_number(a) for a in args)


# --------------------------------------------------------------------------- workload

DatasetName = Literal[
    "digits", "synthetic_classification", "synthetic_regression", "synthetic_images",
    "mnist", "fashion_mnist", "cifar10", "cifar100",
]
TORCHVISION_DATASETS = ("mnist", "fashion_mnist", "cifar10", "cifar100")


FACTORY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class _UserCode(_Spec):
    """Fields of a spec that may name the user's own code instead of a built-in (model, dataset, loss)."""

    factory: str | None = Field(None, pattern=FACTORY_PATTERN)  # "package.module:function" to call instead
    kwargs: dict[str, Any] = {}  # keyword arguments of the factory call (plain data: part of the fingerprint)
    version: str | None = None  # the user's version of the code behind `factory`: bump it when the code changes

    #: The built-in fields a factory replaces: setting one next to `factory` is an error.
    builtin_fields: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _factory_or_builtin(self) -> "_UserCode":
        # Compared with the defaults rather than with what was written: a dumped spec holds every field
        # and must load again (worker processes rebuild the job from its dump).
        if self.factory is None:
            if self.kwargs or self.version is not None:
                extra = "kwargs" if self.kwargs else "version"
                raise ValueError(f"{extra} needs factory (it is passed to the user's function), but got no factory")
            return self
        fields = type(self).model_fields
        both = [f for f in self.builtin_fields if getattr(self, f) != fields[f].default]
        if both:
            raise ValueError(f"factory replaces the built-in {both[0]}: give one of them, but got factory="
                             f"{self.factory!r} and {both[0]}={getattr(self, both[0])!r}")
        try:
            json.dumps(self.kwargs, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError(f"kwargs must be plain data (numbers, strings, lists, mappings), but got {self.kwargs!r}") \
                from None
        return self

    def user_code_identity(self) -> dict[str, Any]:
        """What identifies the user's code in a fingerprint: the import path, its kwargs and version."""
        return {"factory": self.factory, "kwargs": self.kwargs, "version": self.version}


class DatasetSpec(_UserCode):
    builtin_fields: ClassVar[tuple[str, ...]] = (
        "name", "root", "download", "n_samples", "n_features", "n_classes", "noise", "image_shape")
    name: DatasetName = "digits"  # which data; digits ships inside scikit-learn, so it never downloads
    seed: int = Field(0, ge=0, le=MAX_SEED)  # synthetic data and the train/test split: fixed, so recurring runs match
    root: str | None = None  # local directory holding torchvision datasets (required for them)
    download: bool = False  # torchvision datasets are fetched only when the job asks for it
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)  # held-out share for datasets without a split
    n_samples: int = Field(2000, ge=10, le=MAX_SIZE)  # synthetic datasets: how many samples to generate
    n_features: int = Field(20, ge=1, le=MAX_SIZE)  # synthetic datasets: input dimension
    n_classes: int = Field(10, ge=2, le=MAX_SIZE)  # synthetic classification: number of classes
    noise: float = Field(0.1, ge=0.0)  # synthetic regression: label noise std
    # synthetic images: channels, height, width
    image_shape: list[Annotated[int, Field(ge=1, le=MAX_SIZE)]] = [3, 32, 32]
    max_train_samples: int | None = Field(None, ge=1)  # subsample large training sets for speed

    @model_validator(mode="after")
    def _root_for_torchvision(self) -> "DatasetSpec":
        if self.name in TORCHVISION_DATASETS and self.root is None:
            raise ValueError(f"root is required for dataset {self.name!r} (a local directory; "
                             "add download: true to fetch it there)")
        if len(self.image_shape) != 3:
            raise ValueError(f"image_shape must be [channels, height, width], but got {self.image_shape}")
        return self

    @property
    def is_regression(self) -> bool:
        """A built-in regression dataset (a factory's targets decide for themselves when it loads)."""
        return self.factory is None and self.name == "synthetic_regression"

    @property
    def label(self) -> str:
        """How tables name it: the built-in's name or the factory's import path."""
        return self.factory or self.name


class ModelSpec(_UserCode):
    builtin_fields: ClassVar[tuple[str, ...]] = ("name", "hidden", "channels")
    name: Literal["logreg", "mlp", "cnn", "resnet20", "resnet32", "resnet18"] = "cnn"  # architecture
    hidden: list[Annotated[int, Field(ge=1, le=MAX_SIZE)]] = [64]  # mlp: hidden layer widths
    channels: list[Annotated[int, Field(ge=1, le=MAX_SIZE)]] = [8, 16]  # cnn: widths of its two 5x5 convolutions

    @property
    def label(self) -> str:
        """How tables name it: the built-in's name or the factory's import path."""
        return self.factory or self.name


class LossSpec(_UserCode):
    """The user's own loss: a factory returning a callable (outputs, targets) -> scalar mean loss."""

    factory: str = Field(pattern=FACTORY_PATTERN)  # "package.module:function" returning the loss callable


def _loss_form(value: Any) -> str:
    """Which form a `loss` value takes: the user's (a mapping) or a built-in's name."""
    return "user" if isinstance(value, (dict, LossSpec)) else "builtin"


LossChoice = Annotated[
    Union[Annotated[Literal["cross_entropy", "mse"], Tag("builtin")], Annotated[LossSpec, Tag("user")]],
    Discriminator(_loss_form),
]


class OptimizerSpec(_Spec):
    lr: float = Field(0.05, gt=0.0)  # base learning rate eta of the server update
    momentum: float = Field(0.0, ge=0.0, lt=1.0)  # heavy-ball / Nesterov coefficient
    nesterov: bool = False  # Nesterov momentum (NAG) instead of heavy ball
    weight_decay: float = Field(0.0, ge=0.0)  # L2 penalty added to every gradient

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> "OptimizerSpec":
        if self.nesterov and self.momentum == 0.0:
            raise ValueError("nesterov requires momentum > 0, but got momentum=0.0")
        return self


class LRScheduleSpec(_Spec):
    kind: Literal["constant", "step", "cosine"] = "constant"  # shape of the decay
    warmup_epochs: float = Field(0.0, ge=0.0)  # linear warm-up over this many epochs
    warmup_from: Literal["zero", "lr_over_n"] = "zero"  # warm-up start: 0, or eta / n_workers (DANA app. A.5)
    step_epochs: float = Field(10.0, gt=0.0)  # step: multiply by gamma every this many epochs
    gamma: float = Field(0.1, gt=0.0, le=1.0)  # step: decay factor
    total_epochs: float | None = Field(None, gt=0.0)  # cosine: horizon (defaults to budget.max_epochs)


class EvaluationSpec(_Spec):
    every_seconds: float = Field(1.0, gt=0.0)  # virtual seconds between evaluations (time-to-target resolution)
    max_samples: int = Field(2000, ge=1)  # cap on samples per evaluation, so large datasets stay cheap


class WorkloadSpec(_Spec):
    dataset: DatasetSpec = DatasetSpec()  # what to learn
    model: ModelSpec = ModelSpec()  # with which network
    batch_size: int = Field(32, ge=1, le=MAX_SIZE)  # per-worker mini-batch B
    optimizer: OptimizerSpec = OptimizerSpec()  # server-side update hyper-parameters
    lr_schedule: LRScheduleSpec = LRScheduleSpec()  # how eta changes over epochs
    evaluation: EvaluationSpec = EvaluationSpec()  # how often and on how much we measure
    # The training loss: None is the data's own (cross entropy for classes, squared error for real targets),
    # `cross_entropy` or `mse` name one, a mapping {factory, kwargs, version} is the user's.
    loss: LossChoice | None = None


# --------------------------------------------------------------------------- cluster

class DeterministicRTT(_Spec):
    kind: Literal["deterministic"]  # every round trip takes exactly its mean


class ShiftedExponentialRTT(_Spec):
    kind: Literal["shifted_exponential"]  # (1 - alpha) + alpha * Exp(1), mean 1 (DBW paper sec. 4.1)
    alpha: float = Field(0.7, ge=0.0, le=1.0)  # share of the round trip that is random


class UniformRTT(_Spec):
    kind: Literal["uniform"]  # multiplier drawn uniformly in [low, high]
    low: float = Field(0.5, ge=0.0)
    high: float = Field(1.5, gt=0.0)

    @model_validator(mode="after")
    def _ordered(self) -> "UniformRTT":
        if self.high <= self.low:
            raise ValueError(f"high must be > low={self.low}, but got high={self.high}")
        return self


class ParetoRTT(_Spec):
    kind: Literal["pareto"]  # heavy tail: multiplier = scale * Pareto(shape), >= scale
    shape: float = Field(3.0, gt=1.0)  # tail index; > 1 so the mean exists
    scale: float = Field(0.6667, gt=0.0)  # minimum multiplier; default makes the mean 1 at shape 3


class GammaRTT(_Spec):
    kind: Literal["gamma"]  # CVB model (DANA paper appendix A.4, Algorithms 11-12), mean 1
    heterogeneous: bool = False  # Algorithm 12: each worker gets its own mean speed
    # The two coefficients of variation trade places with `heterogeneous`, as in the paper's algorithms:
    # Algorithm 11 (false) draws one mean task time for the whole run with v_task and each task about it
    # with v_mach; Algorithm 12 (true) draws each machine's mean with v_mach and each task about it with v_task.
    v_task: float = Field(0.1, gt=0.0)  # heterogeneous: task times about their machine's mean; else: the run's mean
    v_mach: float = Field(0.1, gt=0.0)  # heterogeneous: the machines' means (0.6 in the paper); else: task times


class TraceRTT(_Spec):
    kind: Literal["trace"]  # empirical round-trip multipliers from a CSV file
    path: str  # CSV with one number per row (first column) or a column named by `column`
    column: str | None = None  # header name of the column to read
    mode: Literal["sample", "replay"] = "sample"  # sample i.i.d. or replay rows in order per worker
    normalize: bool = True  # divide by the trace mean so compute.* sets the mean time


RoundTripSpec = Annotated[
    Union[DeterministicRTT, ShiftedExponentialRTT, UniformRTT, ParetoRTT, GammaRTT, TraceRTT],
    Field(discriminator="kind"),
]


class LinearCompute(_Spec):
    model: Literal["linear"]  # CPU: time = batch / speed (LB-BSP paper sec. 3.2)
    # at speed factor 1; 0 when the computation is all on shared compute units (ClusterSpec.compute_units)
    seconds_per_sample: float = Field(1.0 / 32, ge=0.0)


class GPUCompute(_Spec):
    model: Literal["gpu"]  # GPU: flat below saturation, then linear (LB-BSP paper sec. 3.3.1)
    launch_overhead: float = Field(0.2, gt=0.0)  # Gamma(0) > 0: time of a batch below saturation
    saturation_batch: int = Field(32, ge=1)  # batch size at which the GPU becomes busy
    seconds_per_sample: float = Field(0.02, gt=0.0)  # slope above saturation
    memory_cap_batch: int | None = Field(None, ge=1)  # largest batch one worker's memory holds


ComputeSpec = Annotated[Union[LinearCompute, GPUCompute], Field(discriminator="model")]


class SlowdownSpec(_Spec):
    at: float = Field(ge=0.0)  # virtual time the slowdown starts
    # how long it lasts; .inf (the default) means for the rest of the run, the one float where infinity is
    # allowed (NaN still fails gt)
    duration: float = Field(float("inf"), gt=0.0, allow_inf_nan=True)
    factor: float = Field(gt=0.0)  # compute time multiplier while it lasts
    workers: list[Annotated[int, Field(ge=0)]]  # which workers slow down


class ResourceSpec(_Spec):
    period_seconds: float = Field(5.0, gt=0.0)  # availability changes every this many virtual seconds
    cpu_min: float = Field(0.3, gt=0.0, le=1.0)  # lowest CPU share a worker may get
    memory_min: float = Field(0.5, gt=0.0, le=1.0)  # lowest memory share a worker may get
    smoothness: float = Field(0.7, ge=0.0, lt=1.0)  # AR(1) coefficient: how much availability persists


class ComputeUnitsSpec(_Spec):
    """Compute that several workers share: worker processes on one machine, or a GPU that hosts several
    workers. Worker w's gradients are computed on unit w % count, one at a time, in the order they were
    dispatched (first come, first served). A gradient is ready once its round trip has passed (what the
    worker's own machine adds: an injected straggler's delay, the network) and its unit has computed it,
    so the workers of one unit wait for each other as a real worker process's queue makes them. With
    several workers per unit, a task the server gives up on at an update (its gradient stale under a
    barrier that discards stale gradients) is skipped if its unit has not started it, as a worker process
    skips it (`autosync.core.cluster.ComputeUnits`).
    """

    count: int = Field(ge=1)  # units; worker w computes on unit w % count
    compute: ComputeSpec = LinearCompute(model="linear")  # one gradient's time on a unit of speed 1
    speed_factors: list[Annotated[float, Field(gt=0.0)]] | None = None  # per-unit relative speed

    @model_validator(mode="after")
    def _per_unit_speeds(self) -> "ComputeUnitsSpec":
        if self.speed_factors is not None and len(self.speed_factors) != self.count:
            raise ValueError(f"speed_factors must have count={self.count} entries, "
                             f"but got {len(self.speed_factors)}")
        return self


class ServerSpec(_Spec):
    """The parameter server itself: its links and its update loop (by default infinitely fast).

    Each shard holds 1/shards of the model behind its own link; every pull (the parameters to a worker)
    and every push (a gradient to the server) crosses each shard's link first come, first served, and
    each update costs every shard apply_seconds / shards of its single update loop. That loop also handles
    each gradient as it comes in (gradient_seconds: receiving it, adding it to the aggregate, the policy's
    decision on the arrival), one arrival or update at a time, so a policy that updates often or hears
    from many workers pays for it on the virtual clock as it does on a real server.
    """

    shards: int = Field(1, ge=1)  # parameter-server shards (Sync-Switch's setups use 1 PS)
    bandwidth: float | None = Field(None, gt=0.0)  # bytes per virtual second of a shard's link, each direction
    model_bytes: int | None = Field(None, ge=1)  # bytes of the parameters and of a gradient (None: 4 x the model's)
    apply_seconds: float = Field(0.0, ge=0.0)  # virtual seconds the server takes to apply one update
    gradient_seconds: float = Field(0.0, ge=0.0)  # virtual seconds the server's loop takes per gradient received

    @property
    def instant(self) -> bool:
        """No queueing and no update cost: the cluster model of every job written before this section."""
        return self.bandwidth is None and self.apply_seconds == 0.0 and self.gradient_seconds == 0.0


class ClusterSpec(_Spec):
    n_workers: int = Field(16, ge=1, le=4096)  # n: workers pushing gradients to the server
    round_trip: RoundTripSpec = ShiftedExponentialRTT(kind="shifted_exponential")  # randomness of times
    compute: ComputeSpec = LinearCompute(model="linear")  # how time grows with the batch size
    communication_seconds: float = Field(0.0, ge=0.0)  # fixed push + pull time per round trip
    speed_factors: list[Annotated[float, Field(gt=0.0)]] | None = None  # per-worker relative speed
    slowdowns: list[SlowdownSpec] = []  # transient or persistent stragglers
    resources: ResourceSpec | None = None  # time-varying CPU/memory availability that drives speed
    server: ServerSpec = ServerSpec()  # the parameter server's links and update cost (default: instant)
    compute_units: ComputeUnitsSpec | None = None  # compute several workers share (default: a machine each)

    @model_validator(mode="after")
    def _per_worker_lists(self) -> "ClusterSpec":
        free = isinstance(self.compute, LinearCompute) and self.compute.seconds_per_sample == 0.0
        if free and self.compute_units is None and self.communication_seconds == 0.0:
            raise ValueError("compute.seconds_per_sample may be 0 only where the time is elsewhere (compute_units "
                             "or communication_seconds), but every round trip would take no time")
        n = self.n_workers
        if self.speed_factors is not None and len(self.speed_factors) != n:
            raise ValueError(f"speed_factors must have n_workers={n} entries, "
                             f"but got {len(self.speed_factors)}")
        for i, s in enumerate(self.slowdowns):
            bad = [w for w in s.workers if w >= n]
            if bad:
                raise ValueError(f"slowdowns[{i}].workers must be < n_workers={n}, but got {bad[0]}")
        return self


# --------------------------------------------------------------------------- target, budget, job

class TargetSpec(_Spec):
    metric: Literal["train_loss", "test_loss", "test_accuracy"] = "test_accuracy"  # what defines "done"
    threshold: float = 0.9  # loss below it, or accuracy at or above it

    @field_validator("threshold")
    @classmethod
    def _within_the_metric(cls, value: float, info: ValidationInfo) -> float:
        """A threshold the metric can meet only after training: an accuracy in (0, 1] (0 or less is met before
        the first update, above 1 never), a loss above 0 (a loss is never negative)."""
        metric = info.data.get("metric", "test_accuracy")
        if metric == "test_accuracy" and not 0.0 < value <= 1.0:
            raise PydanticCustomError("threshold_range", "must be > 0 and <= 1 for metric test_accuracy")
        if metric != "test_accuracy" and value <= 0.0:
            raise PydanticCustomError("threshold_range", f"must be > 0 for metric {metric} (a loss is never below 0)")
        return value

    @property
    def lower_is_better(self) -> bool:
        return self.metric != "test_accuracy"

    def reached(self, value: float | None) -> bool:
        """Whether a measured value meets the target (a missing or non-finite one never does)."""
        if value is None or not math.isfinite(value):
            return False
        return value <= self.threshold if self.lower_is_better else value >= self.threshold


class BudgetSpec(_Spec):
    max_updates: int | None = Field(None, ge=1)  # server updates (one per applied gradient group)
    max_epochs: float | None = Field(None, gt=0.0)  # applied samples / training-set size
    max_virtual_seconds: float | None = Field(None, gt=0.0)  # virtual clock limit
    stop_at_target: bool = False  # end the run as soon as the target is met (searches turn this on)
    # end the run at this virtual time, the budget's fractions (Sync-Switch's switch point) unchanged: a
    # tune's constraint checked at BSP's time to target (`tune --constraint-at bsp-target`) sets it
    stop_at_seconds: float | None = Field(None, gt=0.0)

    @model_validator(mode="after")
    def _some_limit(self) -> "BudgetSpec":
        if self.max_updates is None and self.max_epochs is None and self.max_virtual_seconds is None:
            raise ValueError("at least one of max_updates, max_epochs, max_virtual_seconds is required")
        return self


def folder_name(value: str) -> str:
    """A name that names a folder of results (a job's, a family's): '.' or '..' would name the folder it is in
    or the one above, and is refused."""
    if set(value) == {"."}:
        raise PydanticCustomError("dots_only", "must not be only dots (it names a folder of results)")
    return value


class JobSpec(_Spec):
    # used in result paths (results/runs/<name>/...): a folder name, so not '.' or '..' and not too long
    name: str = Field("job", min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9_.-]+$")
    workload: WorkloadSpec = WorkloadSpec()  # dataset, model, optimizer
    cluster: ClusterSpec = ClusterSpec()  # workers and their timing
    target: TargetSpec = TargetSpec()  # what time-to-target measures
    budget: BudgetSpec = BudgetSpec(max_virtual_seconds=100.0)  # when a run stops
    seed: int = Field(0, ge=0, le=MAX_SEED)  # drives every random draw of a run
    _source: str = PrivateAttr("<job>")  # the file (or caller) it came from, for errors found later

    @field_validator("name")
    @classmethod
    def _a_folder_name(cls, value: str) -> str:
        return folder_name(value)

    @property
    def source(self) -> str:
        """The job file this spec was loaded from (or the name a caller gave), for error messages."""
        return self._source

    def with_source(self, source: str) -> "JobSpec":
        """This spec, saying it came from `source` (a file path or a caller's name)."""
        self._source = source
        return self

    @property
    def uses_user_code(self) -> bool:
        """Whether the model, dataset or loss is the user's own code, imported by path."""
        w = self.workload
        return w.model.factory is not None or w.dataset.factory is not None or isinstance(w.loss, LossSpec)

    @model_validator(mode="after")
    def _cross_checks(self) -> "JobSpec":
        ds = self.workload.dataset
        if ds.is_regression and self.target.metric == "test_accuracy":
            raise ValueError("target.metric test_accuracy needs a classification dataset, "
                             "but got dataset synthetic_regression (use train_loss or test_loss)")
        sched = self.workload.lr_schedule
        if sched.kind == "cosine" and sched.total_epochs is None and self.budget.max_epochs is None:
            raise ValueError("workload.lr_schedule.total_epochs is required for kind cosine "
                             "when budget.max_epochs is not set")
        if ds.is_regression and self.workload.loss == "cross_entropy":
            raise ValueError("workload.loss cross_entropy needs a classification dataset, but got dataset "
                             "synthetic_regression (use mse)")
        model = self.workload.model
        if model.factory is None and ds.factory is None and model.name in ("resnet20", "resnet32", "resnet18", "cnn") \
                and ds.name in ("synthetic_classification", "synthetic_regression"):
            raise ValueError(f"workload.model.name {self.workload.model.name} needs image data, "
                             f"but got dataset {ds.name} (use logreg or mlp)")
        return self

    def fingerprint(self) -> str:
        """A stable hash of what makes two runs the same job: workload, cluster and target
        (`autosync.core.fingerprint`). Seed, budget and name are left out: recurring runs of one job share
        one cache entry."""
        return fingerprint(self)
