"""Study mechanics: the storage a study lives in and how many processes share it.

- `storage`: opening a SQLite file or any SQLAlchemy URL, with heartbeats; `locking`: one process at a
  time where it matters (a new study's schema, its BSP reference).
- `trials`: an exact global budget across processes, and the trials of dead processes failed and re-run;
  `interrupts`: Ctrl-C waits for a storage call to return; `claim`: one trial run by Optuna, tagged with its
  process before Ctrl-C can cut it short; `_optuna_internals`: the few Optuna internals those need, in one
  place.
- `siblings`: the other studies of the same job (another space or backend) and what they measured;
  `running_twins`: a proposal another process is training is proposed again.
- `cache`: the record a finished study answers a recurring job with.
- `records`: the keys of what a trial, a study and the cache answer store, and their typed views; the
  modules above read and write trial and study attributes only through it.
"""
