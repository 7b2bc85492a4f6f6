"""Workloads: datasets, models and the flat-parameter loss they define."""
