"""The federated datasets of ``dprec compare``: scikit-learn's digits and a synthetic task.

* :func:`digits_federation`: the 1,797 8x8 digit images that ship with scikit-learn (no
  download), split 80/20 and over clients by a Dirichlet label split, exactly as
  ``dprec demo`` does; a small MLP.
* :func:`synthetic_federation`: a multinomial logistic-regression task with many small,
  heterogeneous clients (10,000 clients of 20 examples by default), the cross-device regime
  where a client holds few examples; softmax regression, the model class of the true model.

Both return a :class:`Federation`: the data as NumPy arrays, every client's indices into the
training set, and the model to train.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .models import MLP, Model, SoftmaxRegression, _pos_float, _pos_int

__all__ = [
    "Federation",
    "digits_federation",
    "dirichlet_split",
    "load_digits_data",
    "synthetic_federation",
]

TEST_FRACTION = 0.2
DEFAULT_SEED = 0
#: The synthetic task's Bayes accuracy target: the true weights are scaled until the expected accuracy of the
#: true model on the pooled distribution is this (labels are drawn from the true softmax, so it is below 1).
SYNTHETIC_TARGET_BAYES = 0.85
#: Standard deviation of every coordinate of a client's feature mean shift (client heterogeneity).
SYNTHETIC_SHIFT_STD = 0.5
#: Standard deviation of the true bias before scaling (relative to the weights' N(0, 1/dim) per entry).
SYNTHETIC_BIAS_STD = 0.1
#: Pooled-distribution points on which the weights' scale is tuned.
_PILOT_SIZE = 10_000


@dataclass(frozen=True, eq=False)
class Federation:
    """A federated classification task: data, the clients' shares of the training set, a model.

    The arrays are shared, not copied: do not modify them. ``eq=False``: two federations
    compare by identity (comparing arrays elementwise has no single truth value).

    Attributes
    ----------
    name : str
        ``"digits"`` or ``"synthetic"``.
    description : str
        One line for reports.
    x_train, x_test : numpy.ndarray
        float32 features, shape (n, d).
    y_train, y_test : numpy.ndarray
        int64 labels.
    clients : tuple of numpy.ndarray
        Every client's sorted int64 indices into ``x_train``: disjoint, together covering
        every training example, none empty.
    num_classes : int
    model : Model
        The model to train on this task.
    bayes_accuracy : float or None
        The true model's test accuracy where the task has one (synthetic), else None.
    """

    name: str
    description: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    clients: tuple[np.ndarray, ...]
    num_classes: int
    model: Model
    bayes_accuracy: float | None = None

    @property
    def num_clients(self) -> int:
        """Number of clients."""
        return len(self.clients)

    @property
    def client_sizes(self) -> np.ndarray:
        """Number of training examples of every client (int64)."""
        return np.array([c.size for c in self.clients], dtype=np.int64)


def _seed(value: Any, name: str = "seed") -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


# --------------------------------------------------------------------------- digits


def dirichlet_split(labels: Any, num_clients: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Split sample indices over clients with a Dirichlet label distribution (non-iid).

    For every class, the class's samples (shuffled) are cut into ``num_clients`` consecutive
    pieces with proportions drawn from ``Dirichlet(alpha, ..., alpha)``; small ``alpha`` gives
    each client few classes. A client left without samples then takes one sample from the
    client that holds the most, so no client is empty.

    Parameters
    ----------
    labels : array_like of int, shape (n,)
        Class label of every sample.
    num_clients : int
        Number of clients, ``1 <= num_clients <= n``.
    alpha : float
        Dirichlet concentration, > 0.
    rng : numpy.random.Generator
        Source of the split's randomness (same generator state -> same split).

    Returns
    -------
    list of numpy.ndarray
        ``num_clients`` sorted int64 index arrays, disjoint, together covering ``0 .. n-1``
        exactly once, none empty.
    """
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    if y.size == 0:
        raise ValueError("labels is empty")
    if y.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers, got dtype {y.dtype}")
    n = _pos_int(num_clients, "num_clients")
    if n > y.size:
        raise ValueError(f"num_clients={n} exceeds the number of samples ({y.size}): some client would be empty")
    a = _pos_float(alpha, "alpha")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    parts: list[list[np.ndarray]] = [[] for _ in range(n)]
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        p = rng.dirichlet(np.full(n, a))
        cuts = np.floor(np.cumsum(p)[:-1] * idx.size).astype(np.int64)
        cuts = np.clip(cuts, 0, idx.size)
        for k, piece in enumerate(np.split(idx, cuts)):
            parts[k].append(piece)
    clients = [np.concatenate(p).astype(np.int64) for p in parts]
    for k in range(n):
        if clients[k].size == 0:
            # n <= samples, so with an empty client the largest one holds at least 2.
            j = int(np.argmax([c.size for c in clients]))
            clients[k], clients[j] = clients[j][-1:], clients[j][:-1]
    return [np.sort(c) for c in clients]


def load_digits_data(seed: int = DEFAULT_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits (1,797 8x8 images, 10 classes), standardised, split 80/20.

    The split is stratified and fixed by ``seed``; features are standardised with the
    training set's mean and standard deviation (constant pixels get scale 1).

    Returns
    -------
    (x_train, y_train, x_test, y_test)
        float32 features of shape (n, 64) and int64 labels.
    """
    from sklearn.datasets import load_digits  # noqa: PLC0415 - optional dependency
    from sklearn.model_selection import train_test_split  # noqa: PLC0415

    data = load_digits()
    x = np.asarray(data.data, dtype=np.float64)
    y = np.asarray(data.target, dtype=np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y)
    mean = x_tr.mean(axis=0)
    std = x_tr.std(axis=0)
    std[std == 0.0] = 1.0
    x_tr = ((x_tr - mean) / std).astype(np.float32)
    x_te = ((x_te - mean) / std).astype(np.float32)
    return x_tr, y_tr, x_te, y_te


def digits_federation(num_clients: int = 100, alpha: float = 0.5, seed: int = 0, hidden: int = 32) -> Federation:
    """scikit-learn's digits over ``num_clients`` clients by a Dirichlet(``alpha``) label split.

    The data and the split are ``dprec demo``'s: :func:`load_digits_data` ``(seed)``, then
    :func:`dirichlet_split` of the training labels with ``numpy.random.default_rng([seed, 0])``.

    Parameters
    ----------
    num_clients : int
        1 .. 1,437 (the training images; no client may be empty).
    alpha : float
        Dirichlet concentration, > 0 (smaller: fewer classes per client).
    seed : int
        >= 0; fixes the train/test split and the client split.
    hidden : int
        Hidden width of the model, ``MLP(64, hidden, 10)``.

    Returns
    -------
    Federation
    """
    num_clients = _pos_int(num_clients, "num_clients")
    alpha = _pos_float(alpha, "alpha")
    seed = _seed(seed)
    hidden = _pos_int(hidden, "hidden")
    x_tr, y_tr, x_te, y_te = load_digits_data(seed)
    if num_clients > y_tr.size:
        raise ValueError(
            f"num_clients={num_clients} exceeds the {y_tr.size} training images (no client may be empty)"
        )
    clients = dirichlet_split(y_tr, num_clients, alpha, np.random.default_rng([seed, 0]))
    description = (
        f"scikit-learn digits, {y_tr.size:,} train / {y_te.size:,} test images, {num_clients:,} clients, "
        f"Dirichlet({alpha:g}) label split"
    )
    return Federation(
        name="digits",
        description=description,
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        clients=tuple(clients),
        num_classes=10,
        model=MLP(x_tr.shape[1], hidden, 10),
    )


# --------------------------------------------------------------------------- synthetic


def _draw_labels(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One label per row of ``probs`` drawn from that row (inverse CDF, vectorised)."""
    u = rng.random(probs.shape[0])
    cdf = np.cumsum(probs, axis=1)
    # The last cumulative sum may round below u; such a draw belongs to the last class.
    return np.minimum((cdf < u[:, None]).sum(axis=1), probs.shape[1] - 1).astype(np.int64)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _expected_bayes_accuracy(z: np.ndarray, t: float) -> float:
    """``E[max_c p_c]`` for the true model ``softmax(t z)`` at logits ``z``: the Bayes classifier's
    expected accuracy when labels are drawn from the model."""
    return float(_softmax(t * z).max(axis=1).mean())


def _tune_scale(z: np.ndarray, target: float) -> float:
    """The scale ``t`` of logits ``z`` with expected Bayes accuracy ``target``, by bisection.

    ``max_c softmax(t z)_c`` is nondecreasing in ``t >= 0`` (its log's derivative is
    ``z_max - E_p[z] >= 0``), from ``1/classes`` at 0 towards 1, so bisection finds it.
    """
    lo, hi = 0.0, 1.0
    while _expected_bayes_accuracy(z, hi) < target:
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:  # degenerate logits (not for Gaussian draws): the largest scale tried
            return hi
    for _ in range(30):  # to 2^-30 of the bracket: far below the pilot sample's own error
        mid = 0.5 * (lo + hi)
        if _expected_bayes_accuracy(z, mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def synthetic_federation(
    num_clients: int = 10_000,
    samples_per_client: int = 20,
    dim: int = 20,
    classes: int = 5,
    seed: int = 0,
    test_size: int = 5_000,
) -> Federation:
    """A multinomial logistic-regression task with heterogeneous clients.

    Everything comes from ``numpy.random.default_rng([seed, 10])``, in this order:

    1. The true model: ``W* = t W0``, ``b = t b0`` with ``W0`` entries ``N(0, 1) / sqrt(dim)``
       and ``b0`` entries ``N(0, 0.1^2)``; the scale ``t`` is tuned by bisection on 10,000
       pooled points so that the Bayes classifier's expected accuracy ``E[max_c p_c(x)]`` is
       0.85 (labels are drawn, so no classifier does better on average).
    2. The test set (drawn before the clients, so it does not depend on ``num_clients`` or
       ``samples_per_client``): ``test_size`` points from the pooled distribution, each with
       its own fresh shift ``mu ~ N(0, 0.5^2 I)`` and ``x ~ N(mu, I)``.
    3. The clients: client ``k`` has a shift ``mu_k ~ N(0, 0.5^2 I)`` and
       ``samples_per_client`` points ``x ~ N(mu_k, I)``; client ``k`` holds training rows
       ``k * samples_per_client`` .. ``(k + 1) * samples_per_client - 1``.

    Every label is DRAWN from ``softmax(x W* + b)`` (not its argmax), so the task has label
    noise and the Bayes accuracy is below 1; the description reports it as measured on the test
    set with ``W*, b`` (also in :attr:`Federation.bayes_accuracy`).

    Parameters
    ----------
    num_clients, samples_per_client : int
        >= 1.
    dim : int
        Feature dimension, >= 1.
    classes : int
        >= 2.
    seed : int
        >= 0.
    test_size : int
        >= 1.

    Returns
    -------
    Federation
        With model ``SoftmaxRegression(dim, classes)``.
    """
    num_clients = _pos_int(num_clients, "num_clients")
    samples_per_client = _pos_int(samples_per_client, "samples_per_client")
    dim = _pos_int(dim, "dim")
    classes = _pos_int(classes, "classes")
    if classes < 2:
        raise ValueError(f"classes must be >= 2, got {classes}")
    seed = _seed(seed)
    test_size = _pos_int(test_size, "test_size")

    rng = np.random.default_rng([seed, 10])
    w0 = rng.standard_normal((dim, classes)) / math.sqrt(dim)
    b0 = rng.normal(0.0, SYNTHETIC_BIAS_STD, size=classes)
    pilot = rng.normal(0.0, SYNTHETIC_SHIFT_STD, (_PILOT_SIZE, dim)) + rng.standard_normal((_PILOT_SIZE, dim))
    t = _tune_scale(pilot @ w0 + b0, SYNTHETIC_TARGET_BAYES)
    w_true, b_true = t * w0, t * b0

    def sample(shifts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = (shifts + rng.standard_normal(shifts.shape)).astype(np.float32)
        # Labels from the float32 features the model will see, so W*, b are exactly the truth for them.
        y = _draw_labels(_softmax(x.astype(np.float64) @ w_true + b_true), rng)
        return x, y

    x_te, y_te = sample(rng.normal(0.0, SYNTHETIC_SHIFT_STD, (test_size, dim)))
    mu = rng.normal(0.0, SYNTHETIC_SHIFT_STD, (num_clients, dim))
    x_tr, y_tr = sample(np.repeat(mu, samples_per_client, axis=0))
    bayes = float(np.mean((x_te.astype(np.float64) @ w_true + b_true).argmax(axis=1) == y_te))

    rows = np.arange(num_clients * samples_per_client, dtype=np.int64).reshape(num_clients, samples_per_client)
    description = (
        f"synthetic softmax regression, {num_clients:,} clients x {samples_per_client} examples "
        f"({y_tr.size:,} train) / {test_size:,} test, {dim} features, {classes} classes, per-client feature "
        f"shift N(0, {SYNTHETIC_SHIFT_STD:g}^2 I), labels drawn from the true model (Bayes accuracy {100 * bayes:.1f}%)"
    )
    return Federation(
        name="synthetic",
        description=description,
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        clients=tuple(rows),
        num_classes=classes,
        model=SoftmaxRegression(dim, classes),
        bayes_accuracy=bayes,
    )
