"""Offline search over synchronization policies.

- `tune` runs one `autosync tune` (`request.TuneRequest`): the BSP reference, the queued first trials,
  the trials, the checks and the cache record.
- What a trial is: `space` and `space_file` (the search-space YAML files), `objective` (a policy trained
  and scored against BSP's reference), `cost` (what a search costs, in BSP trainings).
- `study/`: the storage and how processes share a study; `strategies/`: samplers, pruning, Sync-Switch's
  binary search, verification and neighbours.
- `race_trials`: the race (`autosync.race`) as the study's trials; `race_horizon`: a race run that starts
  beside the rivals setting its horizon and learns it while it trains.
- `switch_log_replay`: Sync-Switch's Table II replayed on the paper's recorded runs (`autosync replay`).
"""
