"""The model and each node's data: linear least squares on synthetic data (NumPy only)."""

from __future__ import annotations

import numpy as np

FEATURES = 16
OUTPUTS = 4


def initial_arrays() -> dict[str, np.ndarray]:
    """The global model before the first round."""
    return {
        "weight": np.zeros((FEATURES, OUTPUTS), dtype=np.float32),
        "bias": np.zeros(OUTPUTS, dtype=np.float32),
    }


def load_data(partition_id: int, num_partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """This node's partition: its own inputs, one shared true model, sizes that differ by node."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id must be in [0, {num_partitions}), got {partition_id}")
    true_w = np.random.default_rng(0).normal(size=(FEATURES, OUTPUTS))
    rng = np.random.default_rng(1000 + partition_id)
    n = 24 + 8 * partition_id
    x = rng.normal(size=(n, FEATURES))
    y = x @ true_w + 0.1 * rng.normal(size=(n, OUTPUTS))
    return x.astype(np.float32), y.astype(np.float32)


def loss(arrays: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    err = x @ arrays["weight"] + arrays["bias"] - y
    return float(np.mean(err**2))


def train(arrays: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, steps: int, lr: float) -> dict[str, np.ndarray]:
    """A few full-batch gradient steps; returns new arrays (same names, shapes and dtypes)."""
    w, b = arrays["weight"].copy(), arrays["bias"].copy()
    lr32 = np.float32(lr)
    for _ in range(steps):
        err = x @ w + b - y
        w -= lr32 * (x.T @ err) / np.float32(len(x))
        b -= lr32 * err.mean(axis=0)
    return {"weight": w.astype(np.float32), "bias": b.astype(np.float32)}
