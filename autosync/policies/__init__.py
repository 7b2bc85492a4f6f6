"""Synchronization policies: compositions of barrier, aggregation, update, batching and schedule."""

from autosync.policies._barriers import BoundedStaleness, FastestK, OnArrival
from autosync.policies._base import (
    Aggregation, Arrival, Barrier, Batching, Policy, Schedule, ServerView, Strategies, Strategy,
    Task, UpdateRule, UpdateStats,
)
from autosync.policies._classic import ASP, BSP, SSP, BackupWorkers
from autosync.policies._dbw import DBW, BlindDBW, DynamicK

__all__ = [
    "ASP", "BSP", "DBW", "SSP", "Aggregation", "Arrival", "BackupWorkers", "Barrier", "Batching",
    "BlindDBW", "BoundedStaleness", "DynamicK", "FastestK", "OnArrival", "Policy", "Schedule", "ServerView", "Strategies",
    "Strategy", "Task", "UpdateRule", "UpdateStats",
]
