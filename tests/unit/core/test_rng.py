"""`rng_for` hands Philox its key without the entropy `Philox(key=...)` draws and ignores: the same generator,
draw for draw, so every table cell and recorded run stays bit for bit what it was."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autosync.core.rng import _philox_key, rng_for

WORD = st.integers(min_value=0, max_value=2 ** 32 - 1)


@settings(max_examples=200, deadline=None)
@given(seed=WORD, stream=WORD, worker=WORD, task=WORD)
def test_rng_for_draws_what_philox_keyed_the_documented_way_draws(seed, stream, worker, task):
    expected = np.random.Generator(np.random.Philox(key=_philox_key(seed, stream, worker, task)))
    got = rng_for(seed, stream, worker, task)
    assert np.array_equal(got.integers(0, 2 ** 62, size=8), expected.integers(0, 2 ** 62, size=8))
    assert np.array_equal(got.standard_normal(5), expected.standard_normal(5))
    for part in ("key", "counter"):
        assert np.array_equal(got.bit_generator.state["state"][part], expected.bit_generator.state["state"][part])
