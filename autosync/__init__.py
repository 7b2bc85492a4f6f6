"""autosync: search and benchmark synchronization policies for parameter-server training."""

__version__ = "0.1.0"
