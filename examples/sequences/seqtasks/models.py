"""A small LSTM classifier with dropout: embedding, one LSTM layer, the last state to the classes."""

from __future__ import annotations

import torch
from torch import nn


class LSTMClassifier(nn.Module):
    def __init__(self, vocab: int, embed: int, hidden: int, dropout: float, n_outputs: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, n_outputs)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        states, _ = self.lstm(self.embed(tokens))
        return self.head(self.drop(states[:, -1]))


def lstm_classifier(n_outputs: int, vocab: int = 4, embed: int = 16, hidden: int = 32,
                    dropout: float = 0.1) -> nn.Module:
    """The model factory a job names; autosync passes `n_outputs` (the dataset's classes) itself."""
    return LSTMClassifier(vocab, embed, hidden, dropout, n_outputs)
