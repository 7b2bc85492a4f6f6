"""Generated token sequences whose label is the token that occurs most often (ties: the smallest)."""

from __future__ import annotations

import numpy as np


def majority_sequences(n_samples: int = 2000, length: int = 12, vocab: int = 4, seed: int = 0):
    """(x, y): `n_samples` sequences of `length` token ids in [0, vocab) and their majority token.

    autosync passes the job's `dataset.seed` as `seed` and splits the samples into train and test itself.
    """
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, size=(n_samples, length))
    counts = np.stack([(x == v).sum(axis=1) for v in range(vocab)], axis=1)
    return x.astype(np.int64), counts.argmax(axis=1).astype(np.int64)
