"""autosync: search and benchmark synchronization policies for parameter-server training."""

__version__ = "0.1.0"

# The public modules and packages (`autosync.api` first: what a user calls); names starting with `_` are internal.
__all__ = ["__version__", "api", "catalog", "cli", "contract", "core", "data", "engine", "experiments", "lattice",
           "measure", "options", "policies", "policy_grid", "policy_score", "race", "reporting",
           "search", "table", "workloads"]
