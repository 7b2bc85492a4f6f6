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

if TYPE_CHECKING:
    import optuna

EXECUTION = "execution"  # study user attribute: where its trials trained (the study name's backend tag)
REFERENCE_FROM = "reference_from"  # in a BSP reference taken from a sibling: the study that trained it


def sibling_studies(study: "optuna.Study", storage: "optuna.storages.BaseStorage") -> list["optuna.Study"]:
    """The other studies in `storage` with `study`'s job fingerprint and execution, oldest first.

    Read from the studies' attributes alone (`get_all_studies`): a study summary would load every
    trial of every study in the storage to count them, seconds in a storage of many jobs, on each
    cache hit of a confirmed tune."""
    import optuna

    mine = study.user_attrs
    if "fingerprint" not in mine or EXECUTION not in mine:
        return []
    siblings = []
    for frozen in internals.all_studies(storage):
        attrs = frozen.user_attrs
        if frozen.study_name == study.study_name or attrs.get("fingerprint") != mine["fingerprint"] \
                or attrs.get(EXECUTION) != mine[EXECUTION]:
            continue
        siblings.append(optuna.load_study(study_name=frozen.study_name, storage=storage))
    return siblings


def finished_trials(studies: list["optuna.Study"]) -> Iterator[tuple[str, "optuna.trial.FrozenTrial"]]:
    """(study name, trial) for every completed or failed trial of `studies`."""
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    for study in studies:
        for trial in study.get_trials(deepcopy=False, states=states):
            yield study.study_name, trial


def scored_as(result: dict[str, Any], scoring: dict[str, Any]) -> bool:
    """Whether a result holding its scoring among its keys (a BSP reference) was scored as `scoring`
    (`autosync.search.objective.trial_scoring`) says, its constraint read at the same place too."""
    return all(result.get(key) == value for key, value in scoring.items()) \
        and result.get("constraint_at") == scoring.get("constraint_at")


def sibling_reference(studies: list["optuna.Study"], scoring: dict[str, Any]) -> dict[str, Any] | None:
    """A sibling's BSP reference trained as `scoring` says (seeds, miss penalty, budget), if any, with
    `reference_from` naming the study that trained it."""
    for study in studies:
        ref = study.user_attrs.get("bsp_reference")
        if isinstance(ref, dict) and scored_as(ref, scoring):
            return {**ref, REFERENCE_FROM: ref.get(REFERENCE_FROM, study.study_name)}
    return None
