"""A user's own package, as autosync imports it from a job file: generated sequences, an LSTM, a loss."""
