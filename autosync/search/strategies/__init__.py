"""How a search proceeds and what it makes of its trials.

- `samplers`: TPE, GP, random and grid, with the composed space's conditions; `binary` and `ladder`:
  Sync-Switch's binary search over the switch point and the cost-ordered ladder (`switch_point` runs them
  on a study).
- `pruning` and `full_budget`: trials race the fastest finished candidates and stop at the target; the
  candidates that can still win are checked at the full budget; `patience`: a search that stops improving
  stops.
- `verify`: the best candidates re-run on a real backend.
"""
