"""The storage as a meta-dataset: the tuned jobs nearest to a new one, and what they answer.

- `neighbours`: which finished studies are near a job (same workload and target, cluster features close);
  a search starts from their winners (`autosync.search.tune`).
- `grid`: the drawn jobs of a robustness report (`autosync robustness`) read as neighbours too
  (`autosync recommend --grid DIR`).
- `vote`: `autosync recommend`, the neighbours' vote, adapted to the job's number of workers.
"""

__all__ = ["grid", "neighbours", "vote"]
