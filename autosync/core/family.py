"""Job families: a spec that draws ordinary jobs, so policies are judged on many clusters, not the papers' few.

A family file names the choices and ranges a job is drawn from: the number of workers, the round-trip
distribution and its parameters, per-worker speed factors, transient slowdowns, the workload (each with
its own target and budget) and the momentum. Job ``i`` is a pure function of (family seed, i): drawing
24 jobs and then 30 gives the same first 24. A drawn job is an ordinary ``JobSpec``: it is written out as
a job file, validated by the job schema and fingerprinted, and nothing downstream knows it was drawn.

    name: stragglers
    seed: 0
    n_workers: [8, 16, 32]                          # a list: one entry drawn uniformly
    momentum: [0.0, 0.9]
    round_trips:                                    # one entry drawn per job
      - {kind: shifted_exponential, alpha: {low: 0.0, high: 1.0}}   # {low, high}: drawn uniformly
      - {kind: pareto, shape: {low: 1.2, high: 3.0}}                # scale: mean 1 unless given
      - kind: deterministic
        slowdowns: {episodes: [1, 2, 3], share: {low: 0.1, high: 0.5}, factor: {low: 2, high: 5}}
    speed_factors: {slow_share: {low: 0.0, high: 0.5}, slowdown: {low: 1.0, high: 4.0}}
    workloads:
      - name: digits_logreg
        workload: {dataset: {name: digits}, model: {name: logreg}, optimizer: {lr: 0.2}}
        target: {metric: train_loss, threshold: 0.3}
        budget: {max_virtual_seconds: 200}
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Annotated, Any, Optional, Union

import numpy as np
import yaml
from pydantic import (
    BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, Tag, TypeAdapter,
    ValidationError, field_validator, model_validator,
)

from autosync.core.errors import FileProblems, JobFileError
from autosync.core.job import (
    BudgetSpec, ClusterSpec, ComputeSpec, JobSpec, LinearCompute, RoundTripSpec, ServerSpec, TargetSpec, WorkloadSpec,
    is_family_data, job_from_dict, load_job,
)
from autosync.core.job_schema import folder_name
from autosync.core.loader import describe_error, read_yaml_file, short_repr

__all__ = ["FamilySpec", "FamilyFileError", "Drawn", "load_family", "looks_like_family", "write_jobs", "describe",
           "draw", "corners"]


class FamilyFileError(FileProblems):
    """A job-family file failed validation."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Range(_Strict):
    """A number drawn uniformly in [low, high] (log-uniformly with log: true)."""

    low: float  # smallest value drawn
    high: float  # largest value drawn
    log: bool = False  # draw log-uniformly: for factors spanning orders of magnitude
    integer: bool = False  # round the draw to an integer

    @field_validator("low", "high")
    @classmethod
    def _no_negative_zero(cls, end: float) -> float:
        return end + 0.0  # -0.0 is 0.0: numpy refuses to draw from 0.0 to -0.0 ("high - low < 0")

    @model_validator(mode="after")
    def _ordered(self) -> "Range":
        if self.high < self.low:
            raise ValueError(f"high must be >= low={self.low}, but got high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log ranges need low > 0, but got low={self.low}")
        if self.integer and math.ceil(self.low) > math.floor(self.high):
            raise ValueError(f"an integer range must hold an integer, but got low={self.low}, high={self.high}")
        return self


def _scalar_form(value: Any) -> str | None:
    """Which type a plain value has; None (an error naming the field once) for anything else."""
    for kind, types in (("<bool>", bool), ("<int>", int), ("<float>", float), ("<str>", str)):
        if isinstance(value, types):
            return kind
    return None


def _drawn_form(value: Any) -> str:
    """Which form a drawn field takes: a {low, high} range, a list of choices, or one value. Validating only
    that form makes a bad field one error naming it, not one per form it failed as."""
    return "<range>" if isinstance(value, (dict, Range)) else "<choices>" if isinstance(value, list) else "<value>"


#: The tags of the unions below, which pydantic puts in an error's location: no part of a field's path.
_TAGS = frozenset({"<bool>", "<int>", "<float>", "<str>", "<range>", "<choices>", "<value>"})

Scalar = Annotated[
    Union[Annotated[StrictBool, Tag("<bool>")], Annotated[StrictInt, Tag("<int>")],
          Annotated[StrictFloat, Tag("<float>")], Annotated[StrictStr, Tag("<str>")]],
    Discriminator(_scalar_form, custom_error_type="scalar_type",
                  custom_error_message="must be a number, a string or a boolean"),
]
# a value, a list of choices (drawn uniformly) or a range
Drawn = Annotated[
    Union[Annotated[Range, Tag("<range>")], Annotated[list[Scalar], Field(min_length=1), Tag("<choices>")],
          Annotated[Scalar, Tag("<value>")]],
    Discriminator(_drawn_form),
]


def draw(value: Any, rng: np.random.Generator) -> Any:
    """One draw of a family field: a range is sampled, a list gives one of its entries, a value itself."""
    if isinstance(value, Range):
        if value.log:
            x = math.exp(rng.uniform(math.log(value.low), math.log(value.high)))
        else:
            x = float(rng.uniform(value.low, value.high))
        if value.integer:  # rounded, but never past the range's ends (4.2..4.8 holds no 5)
            return min(max(int(round(x)), math.ceil(value.low)), math.floor(value.high))
        return round(x, 4)
    if isinstance(value, list):
        if not value:
            raise ValueError("a list of choices must not be empty")
        return value[int(rng.integers(len(value)))]
    return value


def corners(value: Any) -> list[Any]:
    """Every extreme a field can take (both ends of a range, each choice): what validation tries."""
    if isinstance(value, Range):
        ends = [value.low, value.high]
        return [int(round(e)) for e in ends] if value.integer else ends
    if isinstance(value, list):
        return list(value)
    return [value]


class SlowdownDraw(_Strict):
    """Transient slowdowns of a drawn job: `episodes` times, a share of the workers slows by `factor`."""

    episodes: Drawn = 1  # slowdown episodes per job
    share: Drawn = Range(low=0.1, high=0.5)  # share of the workers each episode slows (at least one)
    factor: Drawn = Range(low=2.0, high=5.0)  # compute-time multiplier during an episode
    duration: Drawn = Range(low=10.0, high=60.0)  # virtual seconds an episode lasts
    # each episode starts uniformly in the first half of the job's time budget


class RoundTripDraw(BaseModel):
    """One round-trip distribution of the family: `kind` and the job schema's fields, each drawn."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    __pydantic_extra__: dict[str, Drawn] = Field(init=False)  # the job schema's fields: each drawn

    kind: StrictStr  # a cluster.round_trip kind of the job schema
    slowdowns: Optional[SlowdownDraw] = None  # transient slowdowns added to jobs drawing this entry

    def fields(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SpeedDraw(_Strict):
    """Per-worker speed factors: a share of the workers is slowed, each by its own drawn factor."""

    slow_share: Drawn = Range(low=0.0, high=0.5)  # share of the workers made slower (rounded)
    slowdown: Drawn = Range(low=1.0, high=4.0)  # a slow worker's factor: its speed is 1 / factor


class ServerDraw(_Strict):
    """The parameter server's link of a drawn job (`ServerSpec`): a large model on a slow link makes every
    pull and push cost model_bytes / bandwidth seconds, queued first come first served (bandwidth-bound)."""

    bandwidth: Drawn  # bytes per virtual second of the server's link, each direction
    model_bytes: Drawn  # bytes of the parameters and of a change, whatever the workload's own model
    shards: Drawn = 1  # parameter-server shards, each with its own link


class WorkloadDraw(_Strict):
    """One workload of the family, with the target and budget that make sense for it."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")  # names the entry for readers of the file
    workload: WorkloadSpec  # as in a job file; its optimizer.lr is the rate at its own momentum
    target: TargetSpec  # time-to-target is measured against this
    budget: BudgetSpec  # must set max_virtual_seconds: a missed target is scored against it

    @model_validator(mode="after")
    def _time_budget(self) -> "WorkloadDraw":
        if self.budget.max_virtual_seconds is None:
            raise ValueError("budget.max_virtual_seconds is required (a missed target is scored as twice it)")
        return self


class FamilySpec(_Strict):
    """A family of jobs: every field a value, a list of choices, or a {low, high} range."""

    name: str = Field("family", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")  # prefix of drawn job names, a folder

    _a_folder_name = field_validator("name")(folder_name)
    seed: int = Field(0, ge=0)  # draws the jobs: the same seed, the same family
    n_workers: Drawn = [8, 16, 32]  # number of workers n
    momentum: Drawn = [0.0, 0.9]  # heavy-ball coefficient of the server update
    keep_effective_lr: bool = True  # scale lr by (1 - momentum) / (1 - the workload's): same eta / (1 - mu)
    compute: ComputeSpec = LinearCompute(model="linear")  # how a round trip grows with the batch size
    round_trips: list[RoundTripDraw] = Field(min_length=1)  # one drawn per job
    speed_factors: SpeedDraw = SpeedDraw()  # static heterogeneity
    workloads: list[WorkloadDraw] = Field(min_length=1)  # one drawn per job
    server: ServerDraw | None = None  # the server's link (None: instant, the families before bandwidth-bound ones)

    def job(self, index: int) -> JobSpec:
        """Job `index` of the family: a pure function of (seed, index)."""
        rng = np.random.default_rng([self.seed, index])
        chosen = self.workloads[int(rng.integers(len(self.workloads)))]
        n = int(draw(self.n_workers, rng))
        momentum = float(draw(self.momentum, rng))
        entry = self.round_trips[int(rng.integers(len(self.round_trips)))]
        round_trip = {"kind": entry.kind, **{k: draw(v, rng) for k, v in entry.fields().items()}}
        if round_trip["kind"] == "pareto" and "scale" not in round_trip:
            shape = float(round_trip.get("shape", 3.0))
            round_trip["scale"] = round((shape - 1) / shape, 6)  # mean multiplier scale * shape / (shape - 1) = 1
        budget = chosen.budget.max_virtual_seconds
        slowdowns = _draw_slowdowns(entry.slowdowns, n, budget, rng) if entry.slowdowns else []
        # drawn last: the jobs of a family without a server are what they were before servers were drawn
        server = None if self.server is None else {
            "bandwidth": float(draw(self.server.bandwidth, rng)), "model_bytes": int(draw(self.server.model_bytes, rng)),
            "shards": int(draw(self.server.shards, rng))}
        data = {
            "name": f"{self.name}-{index:03d}",
            "workload": self.workload_at(chosen, momentum),
            "cluster": {"n_workers": n, "round_trip": round_trip, "compute": self.compute.model_dump(mode="json"),
                        "speed_factors": _draw_speeds(self.speed_factors, n, rng), "slowdowns": slowdowns,
                        **({"server": server} if server is not None else {})},
            "target": chosen.target.model_dump(mode="json"),
            "budget": chosen.budget.model_dump(mode="json"),
            "seed": 0,
        }
        return job_from_dict(data, f"{self.name} job {index}")

    def workload_at(self, chosen: "WorkloadDraw", momentum: float) -> dict[str, Any]:
        """A workload of the family as a drawn job takes it: at the drawn momentum, its lr kept effective."""
        workload = chosen.workload.model_dump(mode="json")
        optimizer = workload["optimizer"]
        if self.keep_effective_lr:
            optimizer["lr"] = round(optimizer["lr"] * (1 - momentum) / (1 - optimizer["momentum"]), 8)
        optimizer["momentum"] = momentum
        if momentum == 0.0:
            optimizer["nesterov"] = False
        return workload

    def jobs(self, count: int) -> list[JobSpec]:
        return [self.job(i) for i in range(count)]


def _draw_speeds(spec: SpeedDraw, n: int, rng: np.random.Generator) -> list[float] | None:
    share = float(draw(spec.slow_share, rng))
    slow = min(n, int(round(share * n)))
    if slow == 0:
        return None
    speeds = [1.0] * n
    for worker in sorted(int(w) for w in rng.choice(n, size=slow, replace=False)):
        speeds[worker] = round(1.0 / float(draw(spec.slowdown, rng)), 4)
    return speeds


def _draw_slowdowns(spec: SlowdownDraw, n: int, budget: float, rng: np.random.Generator) -> list[dict]:
    out = []
    for _ in range(int(draw(spec.episodes, rng))):
        size = max(1, min(n, int(round(float(draw(spec.share, rng)) * n))))
        out.append({
            "at": round(float(rng.uniform(0.0, budget / 2)), 2),
            "duration": float(draw(spec.duration, rng)),
            "factor": float(draw(spec.factor, rng)),
            "workers": sorted(int(w) for w in rng.choice(n, size=size, replace=False)),
        })
    return out


def describe(job: JobSpec) -> dict[str, Any]:
    """What a reader needs to tell drawn jobs apart: n, round trips, heterogeneity, workload, momentum."""
    c, w = job.cluster, job.workload
    rt = c.round_trip.model_dump(mode="json")
    kind = rt.pop("kind")
    rt.pop("path", None)
    speeds = c.speed_factors or [1.0] * c.n_workers
    return {
        "job": job.name,
        "n_workers": c.n_workers,
        "round_trip": kind + "".join(f" {k}={v}" for k, v in rt.items() if not isinstance(v, (list, dict))),
        "slow_workers": sum(1 for s in speeds if s < 1.0),
        "speed_spread": max(speeds) / min(speeds),
        "slowdowns": len(c.slowdowns),
        "workload": f"{w.model.name} on {w.dataset.name}",
        "momentum": w.optimizer.momentum,
        "fingerprint": job.fingerprint(),
    }


# --------------------------------------------------------------------------- loading and writing

def looks_like_family(path: str | Path) -> bool:
    """Whether `path` holds a job family rather than a job: a mapping that draws from `workloads` and has no
    `workload` of its own (commands that take either read it as the one it looks like)."""
    return is_family_data(read_yaml_file(Path(path), FamilyFileError))


def load_family(path: str | Path) -> FamilySpec:
    """Load and validate a family file: its schema, and every extreme of every drawn field as a job would
    take it (a round-trip field out of the job schema's range is found here, not in job 17)."""
    file = Path(path)
    data = read_yaml_file(file, FamilyFileError)
    if not isinstance(data, dict):
        raise FamilyFileError(str(file), ["the top level must be a mapping of fields (name, round_trips, "
                                          f"workloads, ...), but got {type(data).__name__}"])
    if "workload" in data and "workloads" not in data:
        raise FamilyFileError(str(file), ["a job file (it has a `workload`, not `workloads` to draw from), but a "
                                          "job-family file is needed (`autosync family --help` says what one holds)"])
    try:
        family = FamilySpec.model_validate(data)
    except ValidationError as exc:
        raise FamilyFileError(str(file), [_describe(e) for e in exc.errors()]) from None
    problems = _corner_problems(family)
    if problems:
        raise FamilyFileError(str(file), problems)
    return family


def _corner_problems(family: FamilySpec) -> list[str]:
    """Validate every extreme of every drawn field against the job schema."""
    problems = _number_problems("n_workers", family.n_workers, "whole numbers between 1 and 4096",
                                lambda v: v == int(v) and 1 <= v <= 4096)
    problems += _number_problems("momentum", family.momentum, "in [0, 1)", lambda v: 0 <= v < 1)
    round_trip = TypeAdapter(RoundTripSpec)
    for i, entry in enumerate(family.round_trips):
        fields = entry.fields()
        for variant in _variants(fields):
            try:
                round_trip.validate_python({"kind": entry.kind, **variant})
            except ValidationError as exc:
                problems += [_round_trip_problem(i, e) for e in exc.errors()]
                break
        if entry.slowdowns is not None:
            where, spec = f"round_trips.{i}.slowdowns", entry.slowdowns
            problems += _number_problems(f"{where}.episodes", spec.episodes, "whole numbers between 0 and 1000",
                                         lambda v: v == int(v) and 0 <= v <= 1000)
            problems += _number_problems(f"{where}.share", spec.share, "in [0, 1]", lambda v: 0 <= v <= 1)
            problems += _number_problems(f"{where}.factor", spec.factor, "> 0", lambda v: v > 0)
            problems += _number_problems(f"{where}.duration", spec.duration, "> 0", lambda v: v > 0)
    try:  # the cluster's own rules on the fields every drawn job shares (a free compute needs its time elsewhere)
        ClusterSpec.model_validate({"compute": family.compute.model_dump(mode="json")})
    except ValidationError as exc:
        problems += [describe_error(e) for e in exc.errors()]
    if family.server is not None:  # every extreme as a drawn job's server takes it, as the round trips are
        fields = {name: getattr(family.server, name) for name in ServerDraw.model_fields}
        for variant in _variants(fields):
            try:
                TypeAdapter(ServerSpec).validate_python(variant)
            except ValidationError as exc:
                problems += [describe_error({**e, "loc": ("server", *e["loc"])}) for e in exc.errors()]
                break
    share = family.speed_factors
    problems += _number_problems("speed_factors.slow_share", share.slow_share, "in [0, 1]", lambda v: 0 <= v <= 1)
    # a slow worker's speed is 1 / slowdown rounded to 4 digits, which must stay > 0
    problems += _number_problems("speed_factors.slowdown", share.slowdown,
                                 "between 1 and 10000 (a slower worker, its speed 1 / slowdown)",
                                 lambda v: 1 <= v <= 10000)
    if not problems:  # each workload as a drawn job takes it, at each extreme momentum
        problems = _workload_problems(family)
    return problems


def _number_problems(field: str, value: Any, rule: str, ok: Any) -> list[str]:
    """A problem for every extreme of a drawn field that is not a number or breaks `rule` (`ok` says)."""
    return [f"{field} must be {rule}, but got {short_repr(v)}" for v in corners(value)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(v)]


def _variants(fields: dict[str, Any], limit: int = 256) -> list[dict[str, Any]]:
    """The round-trip fields at every combination of their extremes (so low > high of a uniform one is
    found too); past `limit` combinations, each field's extremes with the others at their first."""
    choices = [corners(v) for v in fields.values()]
    if math.prod(len(c) for c in choices) <= limit:
        return [dict(zip(fields, combo)) for combo in itertools.product(*choices)]
    base = {k: c[0] for k, c in zip(fields, choices)}
    return [base] + [{**base, k: value} for k, c in zip(fields, choices) for value in c[1:]]


def _workload_problems(family: FamilySpec) -> list[str]:
    """Job-schema problems of each workload as a drawn job takes it (its target and budget beside it, its lr
    kept effective at each extreme momentum), named by its place in the family file."""
    problems: list[str] = []
    for i, chosen in enumerate(family.workloads):
        for j, momentum in enumerate(corners(family.momentum)):
            data = {"workload": family.workload_at(chosen, float(momentum)),
                    "target": chosen.target.model_dump(mode="json"), "budget": chosen.budget.model_dump(mode="json")}
            try:
                job_from_dict(data, f"workloads.{i}")
            except JobFileError as exc:
                at = f" (at momentum {momentum})" if j else ""  # the first extreme: a problem of the workload itself
                problems += [f"workloads.{i}: {p}{at}" for p in exc.problems]
                break
    return problems


def _describe(err: dict[str, Any]) -> str:
    """One pydantic error of a family file, its path without the tags of the drawn forms."""
    return describe_error({**err, "loc": tuple(p for p in err["loc"] if not (isinstance(p, str) and p in _TAGS))})


def _round_trip_problem(index: int, err: dict[str, Any]) -> str:
    """A job-schema error of round-trip entry `index`, named by its place in the family file."""
    if err["type"] == "union_tag_invalid":
        return (f"round_trips.{index}.kind must be one of {err['ctx']['expected_tags']}, "
                f"but got {err['ctx']['tag']!r}")
    return describe_error({**err, "loc": ("round_trips", index, *err["loc"])})


def write_jobs(family: FamilySpec, jobs: list[JobSpec], directory: Path, source: str, command: str
               ) -> list[tuple[Path, dict[str, Any]]]:
    """Write the drawn `jobs` (jobs 0, 1, ... of `family`) as job files, each re-loaded through `load_job` to
    prove it is a valid job; returns each file with what was drawn (`describe`)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for i, job in enumerate(jobs):
        path = directory / f"{job.name}.yaml"
        facts = describe(job)
        header = (f"# Job {i} of family {family.name} ({source}, seed {family.seed}), drawn by `{command}`.\n"
                  f"# n = {facts['n_workers']}, {facts['round_trip']}, {facts['slow_workers']} slow workers "
                  f"(speeds spread {facts['speed_spread']:.2f}x), {facts['slowdowns']} transient slowdowns, "
                  f"{facts['workload']}, momentum {facts['momentum']}.\n")
        body = yaml.safe_dump(job.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
        path.write_text(header + body)
        if load_job(path).fingerprint() != facts["fingerprint"]:  # a dump that loses a field must not pass
            raise JobFileError(str(path), ["the written job does not load back as the drawn job"])
        written.append((path, facts))
    return written
