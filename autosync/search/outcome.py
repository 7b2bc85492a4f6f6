"""What one `autosync tune` found or re-used (`TuneOutcome`), in a module of its own: a recurring job answered
from the cache (`autosync.search.cache_file`) returns one without loading the search (`autosync.search.tune`)
and Optuna with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TuneOutcome:
    """What `tune` found or re-used."""

    study_name: str
    storage: str
    cached: bool  # True when the result came from the cache with no new trial
    new_trials: int
    cache: dict[str, Any]  # the study's cache record (best policy, provenance, amortization)
    top: list[dict[str, Any]] = field(default_factory=list)  # best feasible trials, one per policy, best first
    # the optuna.Study itself, for plots; None where the cache answered from the SQLite file without Optuna
    # (`autosync.search.cache_file`): `optuna.load_study(study_name=..., storage=...)` opens it
    study: Any = None
    verification: Any = None  # autosync.search.strategies.verify.Verification, with --verify-top
    # other spaces' cached answers on this job that are faster than this one's (`faster_elsewhere`)
    faster_elsewhere: list[dict[str, Any]] = field(default_factory=list)
    # the study's finished trials by their role (`autosync.search.study.records.ROLES`): "budget" is what
    # --n-trials counts, the others (points answered untrained, checks, resampled, killed) the search's own
    roles: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The outcome as `autosync tune --json` prints it (plain data: the study itself left out)."""
        return {"study": self.study_name, "cached": self.cached, "new_trials": self.new_trials, "cache": self.cache,
                "top": self.top, "faster_elsewhere": self.faster_elsewhere, "roles": self.roles,
                "verification": self.verification.to_dict() if self.verification is not None else None}
