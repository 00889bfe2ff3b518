"""``dprec demo``: federated DP-REC on scikit-learn's digits, against FedAvg and DP-FedAvg.

One run trains three copies of a small PyTorch MLP (64 -> 32 -> 10, 2,410 parameters in 4
tensors) by federated learning on the digits data set that ships with scikit-learn (no
download), split over ``--clients`` clients by a Dirichlet(``--alpha``) label split:

* **FedAvg**: the mean of the sampled clients' updates, no privacy (server learning rate 1).
* **DP-FedAvg** (McMahan et al., "Learning differentially private recurrent language
  models", ICLR 2018): every update clipped to L2 norm ``C``, the clipped updates summed,
  ``N(0, (z C)^2)`` noise added to every coordinate, the sum divided by the expected number of
  clients ``qN`` and applied with ``--server-lr``. Accounted as the Poisson-sampled Gaussian
  mechanism by the tight baseline :func:`dprec.accounting.sampled_gaussian_epsilon`: the privacy
  loss distribution (PLD) of Google's ``dp_accounting`` when it imports, else the improved RDP
  conversion (Balle et al. 2020); the report names the conversion used. The server adds the
  noise after seeing the clients' raw updates, so DP-FedAvg has a guarantee only against the
  ``"central"`` observer.
* **DP-REC** (Triastcyn, Reisser and Louizos): every client encodes its update with
  :meth:`dprec.DPRECCodec.encode` (clip to ``C = c sigma``, ``--bits`` bits per tensor); the
  server aggregates the messages (:meth:`~dprec.DPRECCodec.aggregate`, their mean) and applies
  the mean with ``--server-lr``. Accounted by the codec's round accountant
  (``method="sound"``) with ``sampling="poisson"`` for REC's messages as sent (``--bits`` per
  tensor, the seed and index visible): a client that is not drawn sends nothing, and a drawn
  client's message is bounded directly against the server (no sampled-Gaussian amplification,
  both tails, improved RDP conversion). Its guarantee holds against the server (who sent which
  message) and hence against every weaker observer, for the zero-out relation. A ``"central"``
  guarantee computed as such must also pay REC's total-variation cost
  (``messages x tensors x 12 exp(c^2) / 2^bits``, paid as ``(1 + e^eps)`` times it out of
  delta), which a few bits per tensor cannot pay.

The three methods see the same data, the same initial model, the same sampled clients in
every round and the same minibatch order. Every client joins each round independently with
probability ``q = B / N`` (Poisson sampling, ``B = --clients-per-round``). The two private
methods are reported under ONE threat model and relation, ``--threat-model`` (default
``"server"``: a Flower server sees every message and who sent it) and ``--relation`` (default
``"zero"``: one client's update replaced by a zero update): ``--epsilon`` calibrates DP-REC's
``c`` with :func:`dprec.accounting.dprec_calibrate` (``bits`` and ``groups`` of the message)
for that observer and relation, at ``delta`` (default ``N^-1.1``, the paper's) over the
rounds, and both methods clip at the same norm ``C`` (``--clip``), so DP-REC's prior scale is
``sigma = C / c``. DP-FedAvg's ``z`` is calibrated by :func:`calibrate_noise_multiplier` for
the chosen observer where it has a guarantee (``"central"``); against ``"messages"`` or
``"server"`` (clients send raw updates, the server holds the unnoised sum) it has none: its
epsilon is reported as ``inf`` with the reason, it runs with the noise calibrated for the
``"central"`` observer, and that central epsilon is printed as a labelled reference line (not
a guarantee against the chosen observer). With ``--threat-model central`` DP-REC's calibration
must pay REC's total-variation cost; where ``--bits`` are too few for that, the demo stops
before training with a message naming ``--bits`` and the bits needed (or
``--threat-model server``). DP-REC has no bound for ``relation="add_remove"`` under Poisson
sampling, which is refused with a ValueError naming ``relation``.

``--seed`` fixes the data split, the model's initialisation, the client sampling and the
minibatch order. The privacy randomness (DP-REC's candidate seeds and Gumbel draws,
DP-FedAvg's Gaussian noise) comes from the operating system's entropy source, as it must in a
deployment, so the private methods' accuracies differ from run to run (DP-REC's final accuracy
by several points at the defaults).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence, TextIO

import numpy as np

__all__ = [
    "DEMO_REQUIREMENTS",
    "DemoConfig",
    "DemoResult",
    "MethodResult",
    "add_arguments",
    "calibrate_noise_multiplier",
    "config_from_args",
    "dirichlet_split",
    "dp_fedavg_epsilon",
    "dp_fedavg_guarantee",
    "format_report",
    "load_digits_data",
    "main",
    "missing_requirements",
    "run_demo",
    "run_from_args",
    "write_plot",
]

#: Import name -> pip name of what the demo needs (``pip install "dprec[demo]"`` installs them all).
DEMO_REQUIREMENTS: dict[str, str] = {
    "torch": "torch",
    "sklearn": "scikit-learn",
    "scipy": "scipy",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
}

METHODS = ("FedAvg", "DP-FedAvg", "DP-REC")

# Defaults, chosen by measurement on a 2-core machine (see ``dprec demo --help``).
DEFAULT_ROUNDS = 300
QUICK_ROUNDS = 150
DEFAULT_EVAL_EVERY = 1
QUICK_EVAL_EVERY = 5
DEFAULT_CLIENTS = 100
DEFAULT_CLIENTS_PER_ROUND = 10
DEFAULT_BITS = 7
DEFAULT_EPSILON = 16.0
DEFAULT_ALPHA = 0.5
DEFAULT_SEED = 0
DEFAULT_CLIP = 1.0
DEFAULT_SERVER_LR = 2.0
DEFAULT_LOCAL_EPOCHS = 2
DEFAULT_LOCAL_LR = 0.1
DEFAULT_BATCH_SIZE = 16
DEFAULT_HIDDEN = 32
#: Whom the demo's guarantees hold against (see :mod:`dprec.accounting.guarantee`; the same tuples).
THREAT_MODELS = ("central", "messages", "server")
RELATIONS = ("add_remove", "zero")
#: ``--threat-model``: the server sees every message and who sent it (a Flower server). DP-REC's bound for
#: REC's messages as sent holds against it at any bits; DP-FedAvg has no guarantee against it (inf).
DEFAULT_THREAT_MODEL = "server"
#: ``--relation``: one client's update replaced by zero (DP-REC under Poisson sampling has no add/remove bound).
DEFAULT_RELATION = "zero"
TEST_FRACTION = 0.2
DIGITS_SAMPLES = 1797
#: Training images after the 80/20 split (scikit-learn rounds the test share up).
TRAIN_SIZE = DIGITS_SAMPLES - math.ceil(TEST_FRACTION * DIGITS_SAMPLES)
FLOAT32_BYTES = 4


# --------------------------------------------------------------------------- configuration and results


@dataclass
class DemoConfig:
    """Everything one demo run depends on (see ``dprec demo --help`` for the meaning of each)."""

    rounds: int = DEFAULT_ROUNDS
    clients: int = DEFAULT_CLIENTS
    clients_per_round: int = DEFAULT_CLIENTS_PER_ROUND
    bits: int = DEFAULT_BITS
    epsilon: float = DEFAULT_EPSILON
    delta: float | None = None  # None: clients ** -1.1
    alpha: float = DEFAULT_ALPHA
    seed: int = DEFAULT_SEED
    clip: float = DEFAULT_CLIP
    server_lr: float = DEFAULT_SERVER_LR
    local_epochs: int = DEFAULT_LOCAL_EPOCHS
    local_lr: float = DEFAULT_LOCAL_LR
    batch_size: int = DEFAULT_BATCH_SIZE
    eval_every: int = DEFAULT_EVAL_EVERY
    progress: bool = True
    quick: bool = False
    threat_model: str = DEFAULT_THREAT_MODEL
    relation: str = DEFAULT_RELATION

    @property
    def sampling_rate(self) -> float:
        """``q = B / N``, each client's probability of joining a round."""
        return self.clients_per_round / self.clients

    @property
    def target_delta(self) -> float:
        """``delta``, by default ``N ** -1.1`` (the DP-REC paper's choice)."""
        return float(self.clients) ** -1.1 if self.delta is None else float(self.delta)

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        _pos_int(self.rounds, "rounds")
        _pos_int(self.clients, "clients")
        _pos_int(self.clients_per_round, "clients_per_round")
        if self.clients > TRAIN_SIZE:
            raise ValueError(
                f"clients={self.clients} exceeds the {TRAIN_SIZE} training images (no client may be empty)"
            )
        if self.clients_per_round > self.clients:
            raise ValueError(f"clients_per_round={self.clients_per_round} exceeds clients={self.clients}")
        _pos_int(self.bits, "bits")
        if self.bits > 24:
            raise ValueError(f"bits must be in 1..24, got {self.bits}")
        _pos_float(self.epsilon, "epsilon")
        if self.delta is not None and not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        _pos_float(self.alpha, "alpha")
        _pos_float(self.clip, "clip")
        _pos_float(self.server_lr, "server_lr")
        _pos_int(self.local_epochs, "local_epochs")
        _pos_float(self.local_lr, "local_lr")
        _pos_int(self.batch_size, "batch_size")
        _pos_int(self.eval_every, "eval_every")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if not isinstance(self.threat_model, str) or self.threat_model not in THREAT_MODELS:
            raise ValueError(f"threat_model must be one of {THREAT_MODELS}, got {self.threat_model!r}")
        if not isinstance(self.relation, str) or self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")


@dataclass
class MethodResult:
    """One method's outcome."""

    name: str
    final_accuracy: float
    best_accuracy: float
    epsilon: float  # inf for FedAvg
    delta: float | None  # None for FedAvg
    bytes_per_client_round: int
    clipped_fraction: float | None  # fraction of client updates that were clipped (None for FedAvg)
    float_bytes: int  # bytes of the update as float32, the reference of the compression ratio
    threat_model: str | None = None  # whom epsilon holds against (None for FedAvg)
    relation: str | None = None  # the neighbouring relation of epsilon (None for FedAvg)
    conversion: str = "-"  # how the composed privacy loss became (epsilon, delta)
    reason: str | None = None  # why epsilon is inf (no guarantee under threat_model / relation)

    @property
    def compression(self) -> float:
        """float32 update bytes over this method's upload bytes."""
        return self.float_bytes / self.bytes_per_client_round


@dataclass
class DemoResult:
    """What :func:`run_demo` returns: the configuration, per-method results and the accuracy history."""

    config: DemoConfig
    methods: list[MethodResult]
    eval_rounds: list[int]
    accuracy: dict[str, list[float]]
    epsilon_history: list[float]  # DP-REC's accountant epsilon after each evaluated round
    num_params: int
    num_tensors: int
    train_size: int
    test_size: int
    client_sizes: list[int]
    clip_multiplier: float  # DP-REC's c
    sigma: float  # DP-REC's prior scale, C / c
    noise_multiplier: float  # DP-FedAvg's z
    total_bits: int  # DP-REC index bits per message
    mean_clients_per_round: float
    empty_rounds: int
    elapsed_s: float
    torch_threads: int
    float_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    #: DP-FedAvg's epsilon against the "central" observer when the chosen one has no DP-FedAvg guarantee
    #: (a labelled reference: its noise is calibrated for that observer), else None.
    dp_fedavg_central_epsilon: float | None = None

    def method(self, name: str) -> MethodResult:
        """The result of the method called ``name``."""
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (infinite epsilon as the string ``"inf"``)."""
        out = asdict(self)
        out["config"]["delta"] = self.config.target_delta
        out["config"]["sampling_rate"] = self.config.sampling_rate
        for m, d in zip(self.methods, out["methods"]):
            d["compression"] = m.compression
            if math.isinf(m.epsilon):
                d["epsilon"] = "inf"
        return out


def _pos_int(value: Any, name: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _pos_float(value: Any, name: str) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return v


# --------------------------------------------------------------------------- requirements


def missing_requirements(plot: bool = True, progress: bool = True) -> list[str]:
    """pip names of the optional packages this run needs but cannot import.

    Parameters
    ----------
    plot : bool
        Whether matplotlib is needed (``--plot``).
    progress : bool
        Whether tqdm is needed (the progress bar).
    """
    missing = []
    for module, pip_name in DEMO_REQUIREMENTS.items():
        if module == "matplotlib" and not plot:
            continue
        if module == "tqdm" and not progress:
            continue
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(pip_name)
    return missing


# --------------------------------------------------------------------------- data


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


# --------------------------------------------------------------------------- privacy


def dp_fedavg_guarantee(
    noise_multiplier: float,
    *,
    sampling_rate: float,
    rounds: int,
    delta: float,
    threat_model: str = "central",
    relation: str = "add_remove",
    conversion: str = "auto",
) -> Any:
    """DP-FedAvg's :class:`dprec.accounting.PrivacyGuarantee`: the Poisson-sampled Gaussian over ``rounds``.

    :func:`dprec.accounting.sampled_gaussian_epsilon` (the tight baseline): ``conversion="auto"``
    is the PLD of ``dp_accounting`` when it imports, else the improved RDP conversion
    (``"rdp-balle"``); the result's ``conversion`` says which. The server adds the noise to the
    sum of raw updates, so only ``threat_model="central"`` has a bound (both relations give the
    same curve); ``"messages"`` and ``"server"`` give ``inf`` with the reason in ``reasons``.
    """
    from .accounting import sampled_gaussian_epsilon  # noqa: PLC0415

    z = _pos_float(noise_multiplier, "noise_multiplier")
    t = _pos_int(rounds, "rounds")
    return sampled_gaussian_epsilon(
        z, sampling_rate, t, delta, threat_model=threat_model, relation=relation, conversion=conversion
    )


def dp_fedavg_epsilon(
    noise_multiplier: float,
    *,
    sampling_rate: float,
    rounds: int,
    delta: float,
    threat_model: str = "central",
    relation: str = "add_remove",
    conversion: str = "auto",
) -> float:
    """Epsilon of DP-FedAvg, ``dp_fedavg_guarantee(...).epsilon`` (``inf`` without a guarantee)."""
    return dp_fedavg_guarantee(
        noise_multiplier, sampling_rate=sampling_rate, rounds=rounds, delta=delta, threat_model=threat_model,
        relation=relation, conversion=conversion,
    ).epsilon


def calibrate_noise_multiplier(
    target_epsilon: float,
    *,
    sampling_rate: float,
    rounds: int,
    delta: float,
    threat_model: str = "central",
    relation: str = "add_remove",
    conversion: str = "auto",
    rtol: float = 1e-8,
) -> float:
    """DP-FedAvg's noise multiplier ``z`` at which :func:`dp_fedavg_epsilon` equals ``target_epsilon``.

    Epsilon decreases with ``z``; the root is bracketed by doubling/halving from ``z = 1`` and
    found with :func:`scipy.optimize.brentq` on the improved RDP conversion. When the conversion
    is the PLD it is then refined on the PLD (never above the RDP epsilon, so the root lies
    below that ``z``), evaluated with ``dp_accounting``'s pessimistic PLD at a discretization of
    ``1e-3`` (:data:`CALIBRATION_PLD_DISCRETIZATION`; ten times faster than the ``1e-4`` of the
    reported epsilon, and within about ``1e-6`` of it relatively): the reported
    :func:`dp_fedavg_epsilon` at the returned ``z`` is then the target to about that precision.

    Raises
    ------
    ValueError
        Naming ``threat_model`` (with the valid choices) when DP-FedAvg has no guarantee under
        it (``"messages"``, ``"server"``), naming ``relation`` or ``conversion`` for an unknown
        one, and naming ``target_epsilon`` when it cannot be reached.
    """
    from scipy.optimize import brentq  # noqa: PLC0415

    eps = _pos_float(target_epsilon, "target_epsilon")
    probe = dp_fedavg_guarantee(
        1.0, sampling_rate=sampling_rate, rounds=rounds, delta=delta, threat_model=threat_model, relation=relation,
        conversion=conversion,
    )
    if not probe.finite:
        raise ValueError(
            f"threat_model={threat_model!r}: DP-FedAvg has no guarantee against this observer with "
            f"relation={relation!r} ({probe.reasons.get(relation, 'no bound is proved')}), so there is no noise to "
            f"calibrate; valid: threat_model='central' (of {THREAT_MODELS}) with relation in {RELATIONS}"
        )

    def excess(z: float) -> float:
        return dp_fedavg_epsilon(z, sampling_rate=sampling_rate, rounds=rounds, delta=delta,
                                 threat_model=threat_model, relation=relation, conversion="rdp-balle") - eps

    lo, hi = 1.0, 1.0
    while excess(lo) < 0.0:
        lo /= 2.0
        if lo < 1e-3:
            raise ValueError(f"target_epsilon={eps:g} is too large to calibrate (z < 1e-3)")
    while excess(hi) > 0.0:
        hi *= 2.0
        if hi > 1e4:
            raise ValueError(f"target_epsilon={eps:g} is too small to calibrate (z > 1e4)")
    z = lo if lo == hi else float(brentq(excess, lo, hi, rtol=rtol))
    if not probe.conversion.startswith("pld"):
        return z

    from .accounting.baselines import _pld_epsilon  # noqa: PLC0415 - the library's PLD, on a coarser grid

    def pld_excess(v: float) -> float:
        return _pld_epsilon(v, sampling_rate, rounds, delta, CALIBRATION_PLD_DISCRETIZATION) - eps

    hi, lo = z, 0.8 * z  # the PLD epsilon at the RDP's z is at most the target
    while pld_excess(lo) < 0.0:
        hi, lo = lo, 0.8 * lo
        if lo < 1e-3:
            raise ValueError(f"target_epsilon={eps:g} is too large to calibrate (z < 1e-3)")
    if pld_excess(hi) >= 0.0:
        return hi
    return float(brentq(pld_excess, lo, hi, rtol=rtol))


#: The PLD discretization of :func:`calibrate_noise_multiplier`'s search (the reported epsilon uses 1e-4).
CALIBRATION_PLD_DISCRETIZATION = 1e-3


# --------------------------------------------------------------------------- model and training


def _make_model(torch: Any, hidden: int, rng: np.random.Generator) -> Any:
    """MLP 64 -> hidden -> 10, initialised like PyTorch's default (uniform +-1/sqrt(fan_in))
    from ``rng``, so that the global torch RNG is neither used nor changed."""
    nn = torch.nn
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    with torch.no_grad():
        for layer in (model[0], model[2]):
            bound = 1.0 / math.sqrt(layer.in_features)
            for p in (layer.weight, layer.bias):
                p.copy_(torch.from_numpy(rng.uniform(-bound, bound, size=tuple(p.shape)).astype(np.float32)))
    return model


def _evaluate(torch: Any, model: Any, x: Any, y: Any) -> float:
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


class _LocalTrainer:
    """Local SGD on one client: a reused worker model, minibatches in a given order."""

    def __init__(self, torch: Any, worker: Any, x: Any, y: Any, lr: float, epochs: int, batch_size: int) -> None:
        self.torch = torch
        self.worker = worker
        self.params = list(worker.parameters())
        self.x, self.y = x, y
        self.lr, self.epochs, self.batch_size = lr, epochs, batch_size
        self.loss = torch.nn.functional.cross_entropy

    def train(self, global_model: Any, batches: list[Any]) -> Any:
        """Copy ``global_model`` into the worker, run SGD over ``batches`` (index tensors); the worker."""
        torch = self.torch
        with torch.no_grad():
            for p, g in zip(self.params, global_model.parameters()):
                p.copy_(g)
        for idx in batches:
            for p in self.params:
                p.grad = None
            loss = self.loss(self.worker(self.x[idx]), self.y[idx])
            loss.backward()
            with torch.no_grad():
                for p in self.params:
                    p.add_(p.grad, alpha=-self.lr)
        return self.worker


def _client_batches(torch: Any, indices: np.ndarray, epochs: int, batch_size: int, rng: np.random.Generator) -> list:
    batches = []
    for _ in range(epochs):
        perm = indices[rng.permutation(indices.size)]
        for i in range(0, perm.size, batch_size):
            batches.append(torch.from_numpy(perm[i : i + batch_size]))
    return batches


def _global_norm(update: Any) -> float:
    return math.sqrt(sum(float(v.double().pow(2).sum()) for v in update.values()))


# --------------------------------------------------------------------------- run


def run_demo(config: DemoConfig, *, progress_stream: TextIO | None = None) -> DemoResult:
    """Run FedAvg, DP-FedAvg and DP-REC side by side (see the module docstring).

    Parameters
    ----------
    config : DemoConfig
    progress_stream : text stream, optional
        Where the tqdm progress bar goes (default ``sys.stderr``); shown only when
        ``config.progress`` is true and the stream is a terminal.

    Returns
    -------
    DemoResult
    """
    if not isinstance(config, DemoConfig):
        raise TypeError(f"config must be a DemoConfig, got {type(config).__name__}")
    config.validate()
    import torch  # noqa: PLC0415 - optional dependency

    from . import torch as dprec_torch  # noqa: PLC0415 - needs torch
    from .accounting import dprec_calibrate  # noqa: PLC0415
    from .codec import DPRECCodec  # noqa: PLC0415

    t_start = time.perf_counter()
    stream = progress_stream if progress_stream is not None else sys.stderr
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 2,410-parameter model: more threads only add overhead
    try:
        return _run(config, torch, dprec_torch, dprec_calibrate, DPRECCodec, stream, t_start)
    finally:
        torch.set_num_threads(prev_threads)


def _run(config: DemoConfig, torch: Any, dprec_torch: Any, dprec_calibrate: Callable, codec_cls: Any,
         stream: TextIO, t_start: float) -> DemoResult:
    cfg = config
    data_rng = np.random.default_rng([cfg.seed, 0])
    x_tr, y_tr, x_te, y_te = load_digits_data(cfg.seed)
    if cfg.clients > y_tr.size:
        raise ValueError(f"clients={cfg.clients} exceeds the {y_tr.size} training samples")
    client_idx = dirichlet_split(y_tr, cfg.clients, cfg.alpha, data_rng)
    xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
    xe, ye = torch.from_numpy(x_te), torch.from_numpy(y_te)

    # The same initial model for every method (and the worker that runs local training).
    models = {name: _make_model(torch, DEFAULT_HIDDEN, np.random.default_rng([cfg.seed, 1])) for name in METHODS}
    worker = _make_model(torch, DEFAULT_HIDDEN, np.random.default_rng([cfg.seed, 1]))
    trainer = _LocalTrainer(torch, worker, xt, yt, cfg.local_lr, cfg.local_epochs, cfg.batch_size)

    template = dprec_torch.decode_template(worker)
    num_params = sum(int(t.numel()) for t in template.values())
    float_bytes = FLOAT32_BYTES * num_params

    # ---- privacy calibration: same epsilon, delta, rounds, sampling, clip norm C, threat model and relation
    n, b, q, delta = cfg.clients, cfg.clients_per_round, cfg.sampling_rate, cfg.target_delta
    tm, rel = cfg.threat_model, cfg.relation
    notes: list[str] = []
    layout = codec_cls(sigma=1.0, bits=cfg.bits).layout(template)
    total_bits, groups = layout.total_bits, layout.num_groups
    _check_central_bits(cfg, groups, delta)  # before the (slow) calibration: a necessary condition
    # ValueError naming threat_model / relation where DP-REC has no guarantee (add/remove under Poisson sampling).
    try:
        c = dprec_calibrate(
            target_epsilon=cfg.epsilon, rounds=cfg.rounds, clients_per_round=b, num_clients=n, delta=delta,
            bits=total_bits, groups=groups, sampling="poisson", threat_model=tm, relation=rel,
        )
    except ValueError as exc:
        if tm == "central" and "bits" in str(exc):
            raise ValueError(_central_bits_text(cfg, groups, None, str(exc))) from exc
        raise
    sigma = cfg.clip / c
    codec = codec_cls(sigma=sigma, clip_multiplier=c, bits=cfg.bits)
    accountant = codec.accountant(
        template, num_clients=n, clients_per_round=b, delta=delta, sampling="poisson", rounds=cfg.rounds,
        threat_model=tm, relation=rel,
    )
    dp_probe = dp_fedavg_guarantee(1.0, sampling_rate=q, rounds=cfg.rounds, delta=delta, threat_model=tm, relation=rel)
    if dp_probe.finite:
        z = calibrate_noise_multiplier(cfg.epsilon, sampling_rate=q, rounds=cfg.rounds, delta=delta,
                                       threat_model=tm, relation=rel)
    else:
        # No guarantee against this observer: run DP-FedAvg with the noise of the central guarantee, and say so.
        z = calibrate_noise_multiplier(cfg.epsilon, sampling_rate=q, rounds=cfg.rounds, delta=delta,
                                       threat_model="central", relation=rel)
        notes.append(
            f"DP-FedAvg has no guarantee against the {tm!r} observer (epsilon inf); it runs with the noise z "
            f"calibrated for epsilon {cfg.epsilon:g} against the 'central' observer"
        )
    central_reference: float | None = None
    noise_std = z * cfg.clip
    noise_rng = np.random.default_rng()  # DP-FedAvg's noise: OS entropy, never the demo's seed

    sample_rng = np.random.default_rng([cfg.seed, 2])
    batch_seed = np.random.default_rng([cfg.seed, 3]).integers(0, 2**63)

    def evaluate(name: str) -> float:
        return _evaluate(torch, models[name], xe, ye)

    eval_rounds: list[int] = [0]
    acc = {name: [evaluate(name)] for name in METHODS}
    eps_hist: list[float] = [0.0]
    clipped = {"DP-FedAvg": 0, "DP-REC": 0}
    updates_seen = 0
    msg_nbytes = 0
    participants = 0
    empty_rounds = 0

    bar = None
    if cfg.progress and _isatty(stream):
        from tqdm import tqdm  # noqa: PLC0415 - only with a progress bar

        bar = tqdm(total=cfg.rounds, file=stream, unit="round", desc="dprec demo", dynamic_ncols=True, leave=False)
    try:
        for r in range(1, cfg.rounds + 1):
            chosen = np.flatnonzero(sample_rng.random(n) < q)
            participants += chosen.size
            if chosen.size == 0:
                empty_rounds += 1
            fed_sum: dict[str, Any] | None = None
            dp_sum = {k: torch.zeros_like(v) for k, v in template.items()}
            messages = []
            for client in chosen:
                crng = np.random.default_rng([int(batch_seed), r, int(client)])
                batches = _client_batches(torch, client_idx[client], cfg.local_epochs, cfg.batch_size, crng)
                # FedAvg: plain mean.
                u = dprec_torch.model_update(trainer.train(models["FedAvg"], batches), models["FedAvg"])
                if fed_sum is None:
                    fed_sum = {key: v.clone() for key, v in u.items()}
                else:
                    for key, v in u.items():
                        fed_sum[key].add_(v)
                # DP-FedAvg: clip to C and sum.
                u = dprec_torch.model_update(trainer.train(models["DP-FedAvg"], batches), models["DP-FedAvg"])
                norm = _global_norm(u)
                scale = 1.0 if norm <= cfg.clip else cfg.clip / norm
                clipped["DP-FedAvg"] += int(norm > cfg.clip)
                for key, v in u.items():
                    dp_sum[key].add_(v, alpha=scale)
                # DP-REC: the client encodes (clip to C = c sigma inside), private randomness from the OS.
                u = dprec_torch.model_update(trainer.train(models["DP-REC"], batches), models["DP-REC"])
                msg, info = codec.encode(u, return_info=True)
                clipped["DP-REC"] += int(info.clipped)
                blob = msg.to_bytes()  # what goes on the wire
                msg_nbytes = len(blob)
                messages.append(blob)
                updates_seen += 1
            if fed_sum is not None:
                dprec_torch.apply_update(models["FedAvg"], {key: v / chosen.size for key, v in fed_sum.items()})
            # DP-FedAvg: Gaussian noise on the sum every round (also when nobody was sampled), / qN.
            noisy = {
                key: (v + torch.from_numpy(noise_rng.normal(0.0, noise_std, size=tuple(v.shape)).astype(np.float32)))
                / (q * n)
                for key, v in dp_sum.items()
            }
            dprec_torch.apply_update(models["DP-FedAvg"], noisy, scale=cfg.server_lr)
            if messages:
                dprec_torch.apply_update(models["DP-REC"], codec.aggregate(messages, template), scale=cfg.server_lr)
            accountant.step()
            if r % cfg.eval_every == 0 or r == cfg.rounds:
                eval_rounds.append(r)
                for name in METHODS:
                    acc[name].append(evaluate(name))
                eps_hist.append(float(accountant.epsilon))
                if bar is not None:
                    bar.set_postfix_str(
                        " ".join(f"{name} {100 * acc[name][-1]:.1f}%" for name in METHODS)
                        + f" eps {accountant.epsilon:.2f}",
                        refresh=False,
                    )
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()

    if msg_nbytes == 0:  # nobody was ever sampled: the size of an all-zero-index message
        msg_nbytes = codec.layout(template).message_nbytes
    dp_g = dp_fedavg_guarantee(z, sampling_rate=q, rounds=cfg.rounds, delta=delta, threat_model=tm, relation=rel)
    if not dp_g.finite:
        central_reference = float(dp_fedavg_guarantee(
            z, sampling_rate=q, rounds=cfg.rounds, delta=delta, threat_model="central", relation=rel
        ).epsilon)
    rec = accountant.accounting
    frac = {k: (v / updates_seen if updates_seen else 0.0) for k, v in clipped.items()}
    methods = [
        MethodResult("FedAvg", acc["FedAvg"][-1], max(acc["FedAvg"]), math.inf, None, float_bytes, None,
                     float_bytes, reason="no privacy mechanism"),
        MethodResult("DP-FedAvg", acc["DP-FedAvg"][-1], max(acc["DP-FedAvg"]), float(dp_g.epsilon), delta,
                     float_bytes, frac["DP-FedAvg"], float_bytes, threat_model=tm, relation=rel,
                     conversion=dp_g.conversion, reason=dp_g.reasons.get(rel)),
        MethodResult("DP-REC", acc["DP-REC"][-1], max(acc["DP-REC"]), float(rec.epsilon), delta, msg_nbytes,
                     frac["DP-REC"], float_bytes, threat_model=tm, relation=rel, conversion=str(rec.conversion),
                     reason=rec.reasons.get(rel)),
    ]
    return DemoResult(
        config=cfg,
        methods=methods,
        eval_rounds=eval_rounds,
        accuracy=acc,
        epsilon_history=eps_hist,
        num_params=num_params,
        num_tensors=len(template),
        train_size=int(y_tr.size),
        test_size=int(y_te.size),
        client_sizes=[int(c.size) for c in client_idx],
        clip_multiplier=float(c),
        sigma=float(sigma),
        noise_multiplier=float(z),
        total_bits=int(total_bits),
        mean_clients_per_round=participants / cfg.rounds,
        empty_rounds=empty_rounds,
        elapsed_s=time.perf_counter() - t_start,
        torch_threads=1,
        float_bytes=float_bytes,
        notes=notes,
        dp_fedavg_central_epsilon=central_reference,
    )


def _central_bits_needed(cfg: DemoConfig, groups: int, delta: float) -> int:
    """Smallest bits per tensor meeting a NECESSARY condition of DP-REC's central guarantee.

    Against the ``"central"`` observer REC's total-variation cost ``eta = messages x groups x 12
    exp(c^2) / 2^bits`` is paid as ``(1 + e^eps) eta`` out of delta, so ``eta (1 + e^eps) < delta``
    with ``exp(c^2) >= 1``: ``2^bits > messages x groups x 12 (1 + e^eps) / delta``, with
    ``messages = rounds x clients_per_round`` as the accounting counts them.
    """
    messages = cfg.rounds * cfg.clients_per_round
    log2_need = math.log2(messages * groups * 12.0) + (math.log1p(math.exp(-cfg.epsilon)) + cfg.epsilon) / math.log(2.0)
    return int(math.floor(log2_need - math.log2(delta))) + 1


def _central_bits_text(cfg: DemoConfig, groups: int, need: int | None, detail: str) -> str:
    head = (
        f"--threat-model {cfg.threat_model}: DP-REC has no central guarantee at epsilon {cfg.epsilon:g} with --bits "
        f"{cfg.bits} ({groups} tensors x {cfg.bits} bits): REC's total-variation cost (rounds x clients per round x "
        f"tensors x 12 exp(c^2) / 2^bits, paid as (1 + e^eps) times it) must stay below delta"
    )
    if need is not None and need <= 24:
        fix = f"it needs at least --bits {need} per tensor here (more may be needed)"
    elif need is not None:
        fix = f"it would need at least {need} bits per tensor, more than the 24 --bits allows"
    else:
        fix = f"it needs more than --bits {cfg.bits} per tensor here ({detail})"
    return (
        f"{head}; {fix}, or use --threat-model server (the default) or messages, whose bound holds for REC's "
        "messages as sent at any bits"
    )


def _check_central_bits(cfg: DemoConfig, groups: int, delta: float) -> None:
    """ValueError naming ``--bits`` when a central DP-REC guarantee is out of reach (before any training)."""
    if cfg.threat_model != "central":
        return
    need = _central_bits_needed(cfg, groups, delta)
    if need > cfg.bits:
        raise ValueError(_central_bits_text(cfg, groups, need, ""))


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:  # noqa: BLE001 - a stream without isatty is not a terminal
        return False


# --------------------------------------------------------------------------- report and plot


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


_THREAT_TEXT = {
    "central": "a trusted server releases only the models",
    "messages": "every client message is seen, not who sent it",
    "server": "the server sees every message and who sent it",
}
_RELATION_TEXT = {"zero": "one client's update replaced by zero", "add_remove": "one client added or removed"}


def _short_conversion(conversion: str) -> str:
    """``"pld (dp_accounting, ...)"`` -> ``"pld"``; ``"rdp-balle, both tails: ..."`` -> ``"rdp-balle, both tails"``."""
    return conversion.split(":")[0].split(" (")[0] or "-"


def format_report(result: DemoResult) -> str:
    """The text ``dprec demo`` prints: setting, the results table and the privacy parameters."""
    cfg = result.config
    sizes = np.asarray(result.client_sizes)
    lines = [
        f"dprec demo: federated learning on scikit-learn digits ({result.train_size} train / {result.test_size} test"
        f" images), MLP 64-{DEFAULT_HIDDEN}-10 ({result.num_params:,} parameters, {result.num_tensors} tensors)",
        f"{cfg.clients} clients (Dirichlet alpha={cfg.alpha:g} label split, {sizes.min()}-{sizes.max()} samples each,"
        f" seed {cfg.seed}); Poisson sampling q={cfg.sampling_rate:.3g} ({cfg.clients_per_round} expected, "
        f"{result.mean_clients_per_round:.1f} on average per round); {cfg.rounds} rounds of {cfg.local_epochs} local"
        f" epochs (batch {cfg.batch_size}, lr {cfg.local_lr:g})",
        "",
    ]
    lines.append(
        f"privacy guarantees against the {cfg.threat_model!r} observer ({_THREAT_TEXT[cfg.threat_model]}), relation"
        f" {cfg.relation!r} ({_RELATION_TEXT[cfg.relation]}); inf = no guarantee"
    )
    header = (
        f"{'method':<10} | {'final acc':>9} {'best acc':>9} | {'epsilon':>8} {'delta':>9} |"
        f" {'bytes/client/round':>18} {'compression':>11} | {'conversion':<21}"
    )
    lines.append(header)
    lines.append("-" * len(header))
    for m in result.methods:
        eps = "inf" if math.isinf(m.epsilon) else f"{m.epsilon:.3f}"
        delta = "-" if m.delta is None else f"{m.delta:.3g}"
        lines.append(
            f"{m.name:<10} | {_pct(m.final_accuracy):>9} {_pct(m.best_accuracy):>9} | {eps:>8} {delta:>9} |"
            f" {m.bytes_per_client_round:>18,} {m.compression:>10.1f}x | {_short_conversion(m.conversion):<21}"
        )
    for m in result.methods:
        if m.threat_model is not None and math.isinf(m.epsilon):
            lines.append(f"{m.name}: inf, no guarantee against the {m.threat_model!r} observer: {m.reason}")
    if result.dp_fedavg_central_epsilon is not None:
        lines.append(
            f"reference only: DP-FedAvg's epsilon against the 'central' observer (a trusted server that releases only"
            f" the models), relation {cfg.relation!r}: {result.dp_fedavg_central_epsilon:.3f}"
        )
    lines.append("")
    dpf, dpr = result.method("DP-FedAvg"), result.method("DP-REC")
    lines.append(
        f"privacy: target epsilon {cfg.epsilon:g} at delta {cfg.target_delta:.3g}"
        f"{' = N^-1.1' if cfg.delta is None else ''} after {cfg.rounds} rounds against the {cfg.threat_model!r}"
        f" observer, relation {cfg.relation!r}; both clip updates to C = {cfg.clip:g}"
        f" (clipped: DP-FedAvg {_pct(dpf.clipped_fraction or 0.0)}, DP-REC {_pct(dpr.clipped_fraction or 0.0)})"
    )
    lines.append(
        f"  DP-REC: c = {result.clip_multiplier:.4f}, sigma = C/c = {result.sigma:.4g}, {cfg.bits} bits x"
        f" {result.num_tensors} tensors = {result.total_bits} bits per message ({dpr.bytes_per_client_round} bytes"
        f" with header and CRC); server lr {cfg.server_lr:g}"
    )
    lines.append(
        f"  DP-FedAvg: z = {result.noise_multiplier:.4f}, noise N(0, (zC)^2) on the sum, divided by qN ="
        f" {cfg.sampling_rate * cfg.clients:g}; server lr {cfg.server_lr:g}. FedAvg: mean of updates, server lr 1"
    )
    b = cfg.sampling_rate * cfg.clients
    lines.append(
        f"  noise std per coordinate of the mean update, with B = {b:g} clients: DP-FedAvg zC/B ="
        f" {result.noise_multiplier * cfg.clip / b:.3g}, DP-REC sigma/sqrt(B) = {result.sigma / math.sqrt(b):.3g}"
        " (every DP-REC client adds its own noise)"
    )
    lines.append(
        f"  accounting: DP-REC {dpr.conversion} (sound method, REC's messages as sent, Poisson rounds composed);"
        f" DP-FedAvg {dpf.conversion} (Poisson-sampled Gaussian, the tight baseline)"
    )
    lines.append(
        f"  bytes: FedAvg and DP-FedAvg upload float32 updates ({result.num_params:,} x 4 = {result.float_bytes:,}"
        " bytes); DP-REC uploads DPRECMessage.to_bytes()"
    )
    for note in result.notes:
        lines.append(f"note: {note}")
    lines.append(f"total time {result.elapsed_s:.1f}s")
    return "\n".join(lines)


def write_plot(result: DemoResult, path: str) -> None:
    """Write test accuracy against rounds (one curve per method) as a PNG to ``path``.

    Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend change).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional dependency
    from matplotlib.figure import Figure  # noqa: PLC0415

    cfg = result.config
    fig = Figure(figsize=(7.0, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    styles = {"FedAvg": ("tab:gray", "--"), "DP-FedAvg": ("tab:blue", "-"), "DP-REC": ("tab:red", "-")}
    for m in result.methods:
        color, ls = styles.get(m.name, (None, "-"))
        label = m.name if m.name == "FedAvg" else f"{m.name} ({m.bytes_per_client_round:,} B/client/round)"
        if m.name == "FedAvg":
            label += f" ({m.bytes_per_client_round:,} B/client/round, no privacy)"
        ax.plot(result.eval_rounds, [100.0 * a for a in result.accuracy[m.name]], ls, color=color, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0.0, 100.0)
    ax.set_xlim(0, cfg.rounds)
    ax.grid(True, alpha=0.3)
    ax.set_title(
        f"digits, {cfg.clients} clients (Dirichlet {cfg.alpha:g}), q={cfg.sampling_rate:.3g}: "
        f"DP at epsilon={cfg.epsilon:g}, delta={cfg.target_delta:.2g}",
        fontsize=10,
    )
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png")


# --------------------------------------------------------------------------- CLI


def _arg_int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v

    return parse


_arg_pos_int = _arg_int_at_least(1, "positive")
_arg_nonneg_int = _arg_int_at_least(0, "non-negative")


def _arg_pos_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


def _arg_bits(text: str) -> int:
    v = _arg_pos_int(text)
    if v > 24:
        raise argparse.ArgumentTypeError(f"must be in 1..24, got {v}")
    return v


def _arg_delta(text: str) -> float:
    v = _arg_pos_float(text)
    if v >= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return v


DESCRIPTION = """\
Federated learning on scikit-learn's digits (Dirichlet non-iid label split, a 64-32-10 PyTorch MLP):
DP-REC against non-private FedAvg and against DP-FedAvg, both private methods reported against the SAME
observer (--threat-model, default server: a Flower server sees every message and who sent it) and
neighbouring relation (--relation, default zero). A progress bar on stderr while it runs (on a
terminal), then a table of test accuracy, epsilon, delta, bytes uploaded per client per round and the
accounting's conversion on stdout (DP-FedAvg: PLD via dp_accounting when installed, else the improved
RDP conversion; DP-REC: the sound accounting of REC's messages as sent, both tails); --plot PATH writes
accuracy against rounds as a PNG. A method without a guarantee against the chosen observer (DP-FedAvg
against messages or server: its server adds the noise to raw updates) is reported as inf with the
reason; it runs with the noise calibrated for the central observer, whose epsilon is printed as a
labelled reference. --threat-model central calibrates DP-REC for a trusted server that releases only
the models: REC's total-variation cost must then be paid out of delta, which --bits 7 per tensor
cannot; the demo then stops, naming the --bits needed. Needs the optional packages:
pip install "dprec[demo]".

--seed fixes the data split, the initialisation, the client sampling and the minibatches. The privacy
randomness (DP-REC's candidate seeds and Gumbel draws, DP-FedAvg's noise) comes from the OS entropy
source, so the private methods' accuracies differ from run to run (DP-REC's by several points)."""

EPILOG = """\
defaults (measured on 2 shared CPU cores: about 35 s for the default 300 rounds, about half with --quick):
  --epsilon 16  with only 100 clients, 10 per round, 300 rounds, against the server with the zero-out
                relation: DP-REC about 29% (best 35%) in one run; DP-FedAvg (inf against the server; its
                noise calibrated for epsilon 16 against the central observer) about 82% (best 85%);
                FedAvg 95%. The private methods' accuracy moves by several points from round to round
                and run to run (see --plot), hence "best acc"
  --threat-model server  a Flower server sees every message and who sent it; DP-REC's bound for REC's
                messages as sent holds against it at any --bits. --threat-model central asks DP-REC to
                pay REC's total-variation cost out of delta, which 7 bits per tensor cannot: the demo
                then stops before training, naming the --bits needed
  --clip 1      for both private methods; almost every update is clipped, so C only scales the step
                (C x server lr): signal and noise both scale with C
  --server-lr 2 for DP-FedAvg and DP-REC (1 to 3 measured alike within the run-to-run spread)
  --rounds 300  --quick: 150 rounds, test accuracy every 5 rounds
  --bits 7      per tensor: 4 x 7 = 28 bits, a 37-byte message (8 bits gives the same 37 bytes); fewer
                bits per tensor mean fewer candidates K = 2^bits and a larger DP-REC epsilon at the same c

why DP-REC trails DP-FedAvg here: DP-FedAvg's server receives the clients' raw clipped updates and
adds one N(0, (zC)^2) to their sum. Every DP-REC client adds its own noise (its message decodes to its
clipped update plus N(0, sigma^2) per coordinate, sigma = C/c), so the server never sees a raw update,
but the mean of B messages carries about sqrt(B)/(c z) = 11 times DP-FedAvg's noise (c = 0.41, z = 0.71
at the defaults): under Poisson sampling DP-REC gets no sampled-Gaussian amplification, since a client
that is not drawn sends nothing, and REC's messages as sent cost more than the Gaussian they simulate.
In exchange, an upload is 37 bytes instead of 9,640, and DP-REC's epsilon holds against the server,
against which DP-FedAvg has no guarantee at all (inf)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``dprec demo``'s options to ``p``."""
    p.add_argument("--rounds", type=_arg_pos_int, default=None,
                   help=f"federated rounds (default {DEFAULT_ROUNDS}, about 35 s on 2 cores; "
                   f"{QUICK_ROUNDS} with --quick)")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_ROUNDS} rounds, test accuracy every {QUICK_EVAL_EVERY} rounds: well under a minute")
    p.add_argument("--clients", type=_arg_pos_int, default=DEFAULT_CLIENTS,
                   help=f"number of clients N (default {DEFAULT_CLIENTS})")
    p.add_argument("--clients-per-round", type=_arg_pos_int, default=DEFAULT_CLIENTS_PER_ROUND,
                   help="expected clients per round B; each client joins a round with probability q = B/N "
                   f"(Poisson sampling; default {DEFAULT_CLIENTS_PER_ROUND})")
    p.add_argument("--bits", type=_arg_bits, default=DEFAULT_BITS,
                   help=f"DP-REC bits per tensor (default {DEFAULT_BITS}: 4 tensors x 7 bits = a 37-byte message)")
    p.add_argument("--epsilon", type=_arg_pos_float, default=DEFAULT_EPSILON,
                   help="target epsilon of both private methods after all rounds: calibrates DP-REC's c "
                   f"(dprec_calibrate) and DP-FedAvg's noise multiplier z (default {DEFAULT_EPSILON:g})")
    p.add_argument("--delta", type=_arg_delta, default=None, help="target delta (default N^-1.1, the DP-REC paper's)")
    p.add_argument("--threat-model", choices=THREAT_MODELS, default=DEFAULT_THREAT_MODEL,
                   help="whom both methods' epsilon holds against: central (a trusted server releases only the "
                   "models), messages (every message seen, not its sender) or server (every message and its sender); "
                   "DP-FedAvg has a guarantee only for central; DP-REC for server and messages at any --bits, for "
                   "central only with enough --bits to pay REC's total-variation cost (the demo stops otherwise, "
                   f"naming the bits needed) (default {DEFAULT_THREAT_MODEL})")
    p.add_argument("--relation", choices=RELATIONS, default=DEFAULT_RELATION,
                   help="neighbouring relation of both epsilons: zero (one client's update replaced by zero) or "
                   "add_remove (one client added or removed; DP-REC has no bound for it under Poisson sampling) "
                   f"(default {DEFAULT_RELATION})")
    p.add_argument("--alpha", type=_arg_pos_float, default=DEFAULT_ALPHA,
                   help="Dirichlet concentration of the label split; smaller is more non-iid "
                   f"(default {DEFAULT_ALPHA:g})")
    p.add_argument("--seed", type=_arg_nonneg_int, default=DEFAULT_SEED,
                   help="seed of the data split, initialisation, client sampling and minibatches "
                   f"(default {DEFAULT_SEED})")
    p.add_argument("--clip", type=_arg_pos_float, default=DEFAULT_CLIP,
                   help=f"L2 clip norm C of both private methods; DP-REC's sigma = C/c (default {DEFAULT_CLIP:g})")
    p.add_argument("--server-lr", type=_arg_pos_float, default=DEFAULT_SERVER_LR,
                   help=f"server learning rate of DP-FedAvg and DP-REC (default {DEFAULT_SERVER_LR:g}; FedAvg uses 1)")
    p.add_argument("--local-epochs", type=_arg_pos_int, default=DEFAULT_LOCAL_EPOCHS,
                   help=f"local SGD epochs per round (default {DEFAULT_LOCAL_EPOCHS})")
    p.add_argument("--local-lr", type=_arg_pos_float, default=DEFAULT_LOCAL_LR,
                   help=f"local SGD learning rate (default {DEFAULT_LOCAL_LR:g})")
    p.add_argument("--batch-size", type=_arg_pos_int, default=DEFAULT_BATCH_SIZE,
                   help=f"local minibatch size (default {DEFAULT_BATCH_SIZE})")
    p.add_argument("--eval-every", type=_arg_pos_int, default=None,
                   help=f"test accuracy every k rounds (default {DEFAULT_EVAL_EVERY}; {QUICK_EVAL_EVERY} with --quick)")
    p.add_argument("--plot", default=None, metavar="PATH", help="write accuracy against rounds as a PNG to PATH")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results and history as JSON to PATH")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """A :class:`DemoConfig` from parsed ``dprec demo`` arguments (``--quick`` sets the defaults it changes)."""
    rounds = args.rounds if args.rounds is not None else (QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS)
    eval_every = args.eval_every if args.eval_every is not None else (
        QUICK_EVAL_EVERY if args.quick else DEFAULT_EVAL_EVERY
    )
    return DemoConfig(
        rounds=rounds,
        clients=args.clients,
        clients_per_round=args.clients_per_round,
        bits=args.bits,
        epsilon=args.epsilon,
        delta=args.delta,
        alpha=args.alpha,
        seed=args.seed,
        clip=args.clip,
        server_lr=args.server_lr,
        local_epochs=args.local_epochs,
        local_lr=args.local_lr,
        batch_size=args.batch_size,
        eval_every=eval_every,
        progress=not args.no_progress,
        quick=args.quick,
        threat_model=args.threat_model,
        relation=args.relation,
    )


def run_from_args(
    args: argparse.Namespace,
    out: TextIO | None = None,
    parser: argparse.ArgumentParser | None = None,
) -> int:
    """Run ``dprec demo`` for parsed arguments; print the report to ``out``. Returns the exit code.

    Inconsistent arguments (e.g. more clients per round than clients) end through
    ``parser.error`` (exit code 2) when a parser is given; missing optional packages print a
    message naming ``pip install "dprec[demo]"`` and return 2.
    """
    t_start = time.perf_counter()
    out = out if out is not None else sys.stdout
    cfg = config_from_args(args)
    try:
        cfg.validate()
    except (TypeError, ValueError) as exc:
        if parser is not None:
            parser.error(str(exc))
        print(f"dprec demo: error: {exc}", file=sys.stderr)
        return 2
    missing = missing_requirements(plot=args.plot is not None, progress=cfg.progress and _isatty(sys.stderr))
    if missing:
        print(
            f"dprec demo needs {', '.join(missing)} (not installed): pip install \"dprec[demo]\"",
            file=sys.stderr,
        )
        return 2
    try:
        result = run_demo(cfg)
    except ValueError as exc:  # e.g. a threat model / relation without a DP-REC guarantee, named by the accounting
        if parser is not None:
            parser.error(str(exc))
        print(f"dprec demo: error: {exc}", file=sys.stderr)
        return 2
    result.elapsed_s = time.perf_counter() - t_start  # the command's time: imports and data loading too
    if args.plot:
        write_plot(result, args.plot)
        result.notes.append(f"plot written to {args.plot}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.as_dict(), f, indent=2)
        result.notes.append(f"JSON written to {args.json}")
    print(format_report(result), file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dprec.demo [options]``; the same as ``dprec demo``."""
    p = argparse.ArgumentParser(
        prog="dprec demo", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p)
    args = p.parse_args(argv)
    return run_from_args(args, parser=p)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
