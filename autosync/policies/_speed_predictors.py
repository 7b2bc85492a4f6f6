"""Sample-processing-speed predictors of LB-BSP for CPU clusters (Chen et al., SoCC 2020, sec. 3.2.2).

Every predictor sees, once per BSP iteration k, each worker's measured speed v_{k-1} (samples per second
of the iteration that just ended) and its current CPU and memory availability (c_k, m_k), and predicts
v_k for all n workers at once:

- `LastValue`: v_k = v_{k-1}.
- `EMA`: exponential moving average with weight alpha on the newest speed (alpha = 0.2).
- `NARX`: eq. (4) with look-back windows d_v = d_c = d_m = 2: a feed-forward network with one hidden
  layer on (v_{k-1}, v_{k-2}, c_k, c_{k-1}, c_{k-2}, m_k, m_{k-1}, m_{k-2}), one network per worker,
  trained online; during the first `warmup` iterations it answers with the EMA (sec. 4, "Online NARX
  Training"). The n networks are trained together as one batched tensor program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


class LastValue:
    """v_k = v_{k-1}."""

    def __init__(self, n_workers: int):
        self.last: np.ndarray | None = None

    def observe(self, speeds: np.ndarray, cpu: np.ndarray, memory: np.ndarray) -> None:
        self.last = speeds.copy()

    def predict(self, cpu: np.ndarray, memory: np.ndarray) -> np.ndarray | None:
        return None if self.last is None else self.last.copy()


class EMA:
    """v_k = alpha v_{k-1} + (1 - alpha) (previous average)."""

    def __init__(self, n_workers: int, alpha: float = 0.2):
        self.alpha = alpha
        self.average: np.ndarray | None = None

    def observe(self, speeds: np.ndarray, cpu: np.ndarray, memory: np.ndarray) -> None:
        self.average = speeds.copy() if self.average is None else \
            self.alpha * speeds + (1 - self.alpha) * self.average

    def predict(self, cpu: np.ndarray, memory: np.ndarray) -> np.ndarray | None:
        return None if self.average is None else self.average.copy()


class NARX:
    """Per-worker NARX speed model (LB-BSP eq. 4), trained online with Adam after `warmup` iterations.

    Speeds are divided by each worker's mean speed over the warm-up, so one learning rate suits every
    worker. Training uses the last `memory` samples (only those are kept, so an update costs the same
    at any length of run); each iteration takes `steps` Adam steps (the first fit, at the end of the
    warm-up, `first_steps`).
    """

    LAGS = 2

    def __init__(self, n_workers: int, warmup: int = 50, hidden: int = 8, ema_alpha: float = 0.2,
                 steps: int = 5, first_steps: int = 300, memory: int = 500, lr: float = 0.01, seed: int = 0):
        self.n = n_workers
        self.warmup = warmup
        self.steps, self.first_steps, self.memory = steps, first_steps, memory
        self.fallback = EMA(n_workers, ema_alpha)
        self.speeds: list[np.ndarray] = []
        self.cpu: list[np.ndarray] = []
        self.mem: list[np.ndarray] = []
        self.hidden, self.lr, self.seed = hidden, lr, seed
        self.optimizer: "torch.optim.Adam | None" = None  # the network is built at its first fit (_build)
        self.scale: np.ndarray | None = None
        self.trained = False

    def _build(self) -> None:
        """The per-worker networks and their optimizer, built when first trained: a policy only bound (as a
        search space's bounds check binds every policy) then never imports torch."""
        import torch

        generator = torch.Generator().manual_seed(self.seed)
        inputs = 3 * (self.LAGS + 1) - 1
        self.w1 = (torch.randn(self.n, inputs, self.hidden, generator=generator) / inputs ** 0.5).requires_grad_()
        self.b1 = torch.zeros(self.n, 1, self.hidden, requires_grad=True)
        self.w2 = (torch.randn(self.n, self.hidden, 1, generator=generator) / self.hidden ** 0.5).requires_grad_()
        self.b2 = torch.zeros(self.n, 1, 1, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.w1, self.b1, self.w2, self.b2], lr=self.lr)

    def observe(self, speeds: np.ndarray, cpu: np.ndarray, memory: np.ndarray) -> None:
        """Add the iteration that just ended: its speeds and the resources it ran with."""
        self.fallback.observe(speeds, cpu, memory)
        keep = max(self.memory + self.LAGS, self.warmup)  # what training and the warm-up scale still read
        for series, value in ((self.speeds, speeds), (self.cpu, cpu), (self.mem, memory)):
            series.append(value.copy())
            del series[:-keep]
        if len(self.speeds) < self.warmup or len(self.speeds) <= self.LAGS + 1:
            return
        if self.scale is None:
            self.scale = np.maximum(np.mean(self.speeds, axis=0), 1e-12)
        self._train(self.first_steps if not self.trained else self.steps)
        self.trained = True

    def predict(self, cpu: np.ndarray, memory: np.ndarray) -> np.ndarray | None:
        """v_k for every worker, given c_k and m_k (the EMA until the network is trained)."""
        if not self.trained:
            return self.fallback.predict(cpu, memory)
        v = np.array(self.speeds[-self.LAGS:]) / self.scale
        c = np.array(self.cpu[-self.LAGS:] + [cpu])
        m = np.array(self.mem[-self.LAGS:] + [memory])
        import torch

        x = torch.from_numpy(np.concatenate([v[::-1], c[::-1], m[::-1]]).T.astype(np.float32))
        with torch.no_grad():
            out = self._forward(x.unsqueeze(1)).squeeze(1).squeeze(-1).numpy()
        return np.maximum(out, 1e-3) * self.scale

    def _forward(self, x: "torch.Tensor") -> "torch.Tensor":
        return (x @ self.w1 + self.b1).tanh() @ self.w2 + self.b2

    def _dataset(self) -> tuple["torch.Tensor", "torch.Tensor"]:
        """Inputs [n, samples, 8] and targets [n, samples, 1] from the recorded series."""
        import torch

        v = np.array(self.speeds) / self.scale
        c, m = np.array(self.cpu), np.array(self.mem)
        k = np.arange(max(self.LAGS, len(v) - self.memory), len(v))
        columns = [v[k - 1], v[k - 2], c[k], c[k - 1], c[k - 2], m[k], m[k - 1], m[k - 2]]
        x = np.stack(columns, axis=-1).transpose(1, 0, 2)
        y = v[k].T[..., None]
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))

    def _train(self, steps: int) -> None:
        if self.optimizer is None:
            self._build()
        x, y = self._dataset()
        for _ in range(steps):
            self.optimizer.zero_grad()
            loss = ((self._forward(x) - y) ** 2).mean()
            loss.backward()
            self.optimizer.step()
