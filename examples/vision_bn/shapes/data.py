"""Synthetic RGB images: a bright square, cross, ring or stripe pattern on noise, one class each."""

from __future__ import annotations

import numpy as np


def shape_images(n_train: int = 800, n_test: int = 200, size: int = 32, noise: float = 0.6, seed: int = 0):
    """A mapping with x_train, y_train, x_test, y_test (N x 3 x size x size images) and n_classes = 4."""
    rng = np.random.default_rng(seed)
    r = np.arange(size)
    yy, xx = np.meshgrid(r, r, indexing="ij")
    c = size / 2
    masks = np.stack([
        (abs(yy - c) < size / 4) & (abs(xx - c) < size / 4),                 # square
        (abs(yy - c) < size / 10) | (abs(xx - c) < size / 10),                # cross
        abs(np.hypot(yy - c, xx - c) - size / 3) < size / 10,                 # ring
        (xx // max(1, size // 8)) % 2 == 0,                                   # stripes
    ]).astype(np.float32)

    def draw(n: int):
        labels = rng.integers(0, 4, n)
        colours = rng.uniform(0.5, 1.5, size=(n, 3, 1, 1)).astype(np.float32)
        images = masks[labels][:, None] * colours + noise * rng.normal(size=(n, 3, size, size)).astype(np.float32)
        return images.astype(np.float32), labels.astype(np.int64)

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test, "n_classes": 4}
