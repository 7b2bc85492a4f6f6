"""Synchronization policies: compositions of barrier, aggregation, update, batching and schedule.

`Composed` fills the slots one by one (`compose(barrier=ssp, update=dana_slim)`); each named policy is a preset.
"""

from autosync.policies._barriers import BoundedStaleness, FastestK, OnArrival
from autosync.policies._base import (
    Aggregation, Arrival, Barrier, Batching, LocalSteps, Policy, Preset, Progress, Schedule, ServerView, Strategies, Strategy,
    Task, UpdateRule, UpdateStats,
)
from autosync.policies._classic import ASP, BSP, SSP, BackupWorkers
from autosync.policies._composed import (
    SEED_POLICIES, Composed, check_composition, composition_of, cross_paper_variants, reads_parameter,
)
from autosync.policies._dana import DANADC, DCASGD, LWP, NAGASGD, DANASlim, DANAZero, MultiASGD
from autosync.policies.dbw import DBW, BlindDBW, DynamicK
from autosync.policies._lbbsp import LBBSP, StaticSplit
from autosync.policies._local import EASGD, AdaComm, AsyncLocalSGD, DiLoCo, LocalSGD
from autosync.policies._sync_switch import SyncSwitch

__all__ = [
    "ASP", "AdaComm", "AsyncLocalSGD", "DiLoCo", "EASGD", "LocalSGD", "LocalSteps", "Aggregation", "Arrival", "BSP", "BackupWorkers", "Barrier", "Batching", "BlindDBW",
    "BoundedStaleness", "Composed", "check_composition", "composition_of", "reads_parameter", "cross_paper_variants", "DANADC", "DANASlim", "DANAZero", "DBW", "DCASGD", "DynamicK", "FastestK", "LBBSP",
    "LWP", "MultiASGD", "NAGASGD", "OnArrival", "Policy", "Preset", "Progress", "SEED_POLICIES", "SSP", "Schedule", "ServerView",
    "StaticSplit", "Strategies", "Strategy", "SyncSwitch", "Task", "UpdateRule", "UpdateStats",
]
