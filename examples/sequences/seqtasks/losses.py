"""A loss factory: cross entropy with label smoothing, as a callable (outputs, labels) -> mean loss."""

from __future__ import annotations

import torch.nn.functional as F


def smoothed_cross_entropy(smoothing: float = 0.05):
    def loss(outputs, labels):
        return F.cross_entropy(outputs, labels, label_smoothing=smoothing)

    return loss
