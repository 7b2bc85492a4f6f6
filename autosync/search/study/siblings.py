"""Sibling studies: other searches of the same job on the same backend in the same storage.

A tune over the `composed` space after one over `policy` (or `static_k` after `policy`) proposes many
policies the other study already trained: every seed policy is a preset of `compose`, and backup k is a
point of both. Trained with the same seeds, such a policy gives the same runs, so a trial whose canonical
policy (`Policy.canonical`) a sibling finished, scored alike, is answered from the sibling's result, and
a new study takes its BSP reference from a sibling instead of training BSP again.

Siblings are found by the job's fingerprint and the execution tag each study records (`describe`): a
result of the simulator never answers for a worker-process tune, nor the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.records import REFERENCE_FROM, StudyRecord, scored_as

if TYPE_CHECKING:
    import optuna

def sibling_studies(study: "optuna.Study", storage: "optuna.storages.BaseStorage") -> list["optuna.Study"]:
    """The other studies in `storage` with `study`'s job fingerprint and execution, oldest first.

    Read from the studies' attributes alone (`get_all_studies`): a study summary would load every
    trial of every study in the storage to count them, seconds in a storage of many jobs, on each
    cache hit."""
    import optuna

    mine = StudyRecord(study.user_attrs)
    if mine.fingerprint is None or mine.execution is None:
        return []
    return [optuna.load_study(study_name=frozen.study_name, storage=storage)
            for frozen in internals.all_studies(storage)
            if frozen.study_name != study.study_name and is_sibling(mine, StudyRecord(frozen.user_attrs))]


def is_sibling(mine: StudyRecord, theirs: StudyRecord) -> bool:
    """Whether a study whose attributes are `theirs` is a sibling of the study whose attributes are `mine`
    (another study): the same job fingerprint and execution, both known."""
    return mine.fingerprint is not None and mine.execution is not None \
        and theirs.fingerprint == mine.fingerprint and theirs.execution == mine.execution


def finished_trials(studies: list["optuna.Study"]) -> Iterator[tuple[str, "optuna.trial.FrozenTrial"]]:
    """(study name, trial) for every completed or failed trial of `studies`."""
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    for study in studies:
        for trial in study.get_trials(deepcopy=False, states=states):
            yield study.study_name, trial


def sibling_reference(studies: list["optuna.Study"], scoring: dict[str, Any]) -> dict[str, Any] | None:
    """A sibling's BSP reference trained as `scoring` says (seeds, miss penalty, budget), if any, with
    `reference_from` naming the study that trained it."""
    for study in studies:
        ref = StudyRecord(study.user_attrs).bsp_reference
        if ref is not None and scored_as(ref, scoring):
            return {**ref, REFERENCE_FROM: ref.get(REFERENCE_FROM, study.study_name)}
    return None
