"""NumPy classifiers with exact gradients, and the local training loops of ``dprec compare``.

``dprec compare`` must run with NumPy alone, so the models here are written out by hand: a
one-hidden-layer ReLU network (:class:`MLP`) and multinomial logistic regression
(:class:`SoftmaxRegression`). Parameters are plain ``dict[str, numpy.ndarray]`` with the names
in a fixed order (the order :meth:`Model.init_params` returns them in, which :func:`flatten`
follows). The arithmetic runs in the parameters' dtype: float32 in training, float64 where a
test checks the gradients against finite differences.

Training loops:

* :func:`local_sgd`: plain minibatch SGD over given index batches (FedAvg's, DP-FedAvg's and
  DP-REC's local training); :func:`client_batches` draws those batches exactly as
  ``dprec demo`` does.
* :func:`dp_sgd_local`: DP-SGD on one client's own data (Poisson sampling, per-example
  clipping, Gaussian noise), for local differential privacy of every example in the style of
  Heikkila et al.

All examples of a batch are processed at once (matrix products, no Python loop over
examples). DP-SGD's clipped sum never materialises per-example gradients: every tensor's
per-example gradient is an outer product ``u_i v_i^T`` (or a vector), whose norm is
``|u_i| |v_i|``, and the clipped sum ``sum_i s_i u_i v_i^T`` is ``U^T diag(s) V``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "MLP",
    "Model",
    "SoftmaxRegression",
    "client_batches",
    "dp_sgd_local",
    "flatten",
    "local_sgd",
    "unflatten",
]

Params = dict[str, np.ndarray]


# --------------------------------------------------------------------------- argument checks


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


def _nonneg_float(value: Any, name: str) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not (v >= 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return v


def _generator(value: Any, name: str) -> np.random.Generator:
    if not isinstance(value, np.random.Generator):
        raise TypeError(f"{name} must be a numpy.random.Generator, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- models


def _row_max(z: np.ndarray) -> np.ndarray:
    """``z.max(axis=1)``, faster for few columns: NumPy's reduction over a short inner axis costs
    per row (7 ms for 200,000 x 5), an elementwise maximum over the columns does not (0.6 ms)."""
    if z.shape[1] > 32:
        return z.max(axis=1)
    m = z[:, 0].copy()
    for j in range(1, z.shape[1]):
        np.maximum(m, z[:, j], out=m)
    return m


def _wsum_outer(u: np.ndarray, v: np.ndarray, w: np.ndarray | float) -> np.ndarray:
    """``sum_i w_i u_i v_i^T`` for rows ``u_i``, ``v_i`` and weights ``w`` (an array (n,) or one number)."""
    # (v^T u)^T, not u^T v: OpenBLAS is nearly twice as fast with the narrower factor transposed (200,000 x 20
    # times 200,000 x 5: 1.6 ms against 2.9 ms).
    if np.ndim(w) == 0:
        return np.ascontiguousarray((v.T @ u).T) * w  # scale the small result, not the tall factor
    return np.ascontiguousarray(((v * w[:, None]).T @ u).T)


def _wsum(v: np.ndarray, w: np.ndarray | float) -> np.ndarray:
    """``sum_i w_i v_i``, as a matrix-vector product: NumPy's ``v.sum(axis=0)`` over a tall, narrow ``v``
    is ten times slower than BLAS."""
    if np.ndim(w) == 0:
        return (np.ones(v.shape[0], dtype=v.dtype) @ v) * w
    return w @ v


def _softmax_xent(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-example cross-entropy of logits ``z`` (n, k) at labels ``y``, and ``softmax(z) - onehot(y)``.

    Stable: the row maximum is subtracted before exponentiating, and the loss is taken as
    ``log(sum exp) - z_y`` of the shifted logits, so neither overflows nor takes log(0).
    """
    s = z - _row_max(z)[:, None]
    e = np.exp(s)
    tot = e @ np.ones(z.shape[1], dtype=z.dtype)  # row sums, each >= 1 (the max's term is exp(0))
    # Flat positions of the labels' entries: one gather and one scatter, cheaper than 2-D fancy indexing.
    at = np.arange(0, z.size, z.shape[1]) + y
    losses = np.log(tot) - s.ravel()[at]
    delta = e / tot[:, None]
    delta.ravel()[at] -= 1  # delta is a fresh C-contiguous array: ravel() is a view, the update lands
    return losses, delta


class Model:
    """A classifier whose parameters are a ``dict[str, numpy.ndarray]`` in a fixed name order.

    Subclasses define :attr:`param_shapes`, :attr:`in_dim`, :attr:`num_classes` and the
    private hooks ``_logits``, ``_backward``, ``_weighted_grad``, ``_per_example`` and
    ``_sq_norms``; the public methods check their arguments and use those hooks. Every method
    computes in the dtype of ``params`` (``x`` is cast to it).

    Attributes
    ----------
    name : str
        Short description, e.g. ``"mlp-64-32-10"``.
    """

    name: str = "model"
    in_dim: int
    num_classes: int

    # ------------------------------------------------------------------ structure

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every parameter tensor, in the fixed order."""
        raise NotImplementedError

    @property
    def num_params(self) -> int:
        """Number of scalar parameters (from the shapes; no ``params`` needed)."""
        return sum(math.prod(s) for s in self.param_shapes.values())

    def _fan_in(self, name: str) -> int:
        raise NotImplementedError

    def init_params(self, rng: np.random.Generator) -> Params:
        """Fresh float32 parameters, uniform on ``+-1/sqrt(fan_in)`` like PyTorch's ``nn.Linear``.

        Weights are drawn in PyTorch's ``(out, in)`` layout and in PyTorch's order (weight,
        then bias, layer by layer) and then transposed, so the same generator state gives the
        same initial model as ``dprec demo``'s PyTorch MLP.

        Parameters
        ----------
        rng : numpy.random.Generator

        Returns
        -------
        dict of str to numpy.ndarray
            float32 tensors of :attr:`param_shapes`, in that order.
        """
        _generator(rng, "rng")
        out: Params = {}
        for name, shape in self.param_shapes.items():
            bound = 1.0 / math.sqrt(self._fan_in(name))
            torch_shape = shape[::-1]  # (in, out) here is (out, in) in PyTorch
            draw = rng.uniform(-bound, bound, size=torch_shape)
            out[name] = np.ascontiguousarray(draw.T, dtype=np.float32)
        return out

    # ------------------------------------------------------------------ checks

    def _check_params(self, params: Any) -> np.dtype:
        if not isinstance(params, dict):
            raise TypeError(f"params must be a dict of arrays, got {type(params).__name__}")
        shapes = self.param_shapes
        if list(params) != list(shapes):
            raise ValueError(f"params must have the keys {list(shapes)} in that order, got {list(params)}")
        dtype = None
        for k, s in shapes.items():
            v = params[k]
            if not isinstance(v, np.ndarray) or v.shape != s:
                got = v.shape if isinstance(v, np.ndarray) else type(v).__name__
                raise ValueError(f"params[{k!r}] must be an array of shape {s}, got {got}")
            if v.dtype.kind != "f":
                raise TypeError(f"params[{k!r}] must be floating point, got dtype {v.dtype}")
            if dtype is None:
                dtype = v.dtype
            elif v.dtype != dtype:
                raise TypeError(f"params must share one dtype, got {dtype} and {v.dtype} ({k!r})")
        assert dtype is not None
        return dtype

    def _check_x(self, x: Any, dtype: np.dtype) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"x must have shape (n, {self.in_dim}), got {x.shape}")
        return x.astype(dtype, copy=False)

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.dtype.kind not in "iu":
            raise TypeError(f"y must be integers, got dtype {y.dtype}")
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},) to match x, got {y.shape}")
        if n and (y.min() < 0 or y.max() >= self.num_classes):
            raise ValueError(f"y must be class labels in 0..{self.num_classes - 1}")
        return y

    def _check(self, params: Any, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        dtype = self._check_params(params)
        xa = self._check_x(x, dtype)
        return xa, self._check_y(y, xa.shape[0])

    # ------------------------------------------------------------------ hooks

    def _logits(self, params: Params, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _backward(self, params: Params, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, tuple]:
        """Per-example losses (n,) and what the gradient hooks need."""
        raise NotImplementedError

    def _weighted_grad(self, params: Params, cache: tuple, w: np.ndarray | float) -> Params:
        """``sum_i w_i grad_i`` for per-example weights ``w`` (an array (n,), or one number for all)."""
        raise NotImplementedError

    def _per_example(self, params: Params, cache: tuple) -> Params:
        raise NotImplementedError

    def _sq_norms(self, params: Params, cache: tuple) -> np.ndarray:
        """Squared L2 norm of every example's whole gradient (all tensors together), (n,)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ public

    def logits(self, params: Params, x: Any) -> np.ndarray:
        """Class scores, shape ``(n, num_classes)``, in the dtype of ``params``."""
        dtype = self._check_params(params)
        return self._logits(params, self._check_x(x, dtype))

    def loss(self, params: Params, x: Any, y: Any) -> float:
        """Mean cross-entropy over the batch (``n >= 1``)."""
        xa, ya = self._check(params, x, y)
        if ya.size == 0:
            raise ValueError("x and y are empty: the mean loss of no examples is undefined")
        losses, _ = self._backward(params, xa, ya)
        return float(np.mean(losses, dtype=np.float64))

    def loss_and_grad(self, params: Params, x: Any, y: Any) -> tuple[float, Params]:
        """Mean cross-entropy over the batch and its gradient.

        Parameters
        ----------
        params : dict of str to numpy.ndarray
        x : array_like, shape (n, in_dim)
        y : array_like of int, shape (n,)
            ``n >= 1``.

        Returns
        -------
        (float, dict of str to numpy.ndarray)
            The loss and the gradient, tensors of the shapes and dtype of ``params``.
        """
        xa, ya = self._check(params, x, y)
        if ya.size == 0:
            raise ValueError("x and y are empty: the mean loss of no examples is undefined")
        return self._loss_and_grad(params, xa, ya)

    def _loss_and_grad(self, params: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
        losses, cache = self._backward(params, x, y)
        return float(np.mean(losses, dtype=np.float64)), self._weighted_grad(params, cache, 1.0 / y.size)

    def per_example_grads(self, params: Params, x: Any, y: Any) -> Params:
        """The gradient of every example's own loss (not divided by the batch size).

        Returns
        -------
        dict of str to numpy.ndarray
            For every parameter of shape ``s`` an array of shape ``(n, *s)``; their mean over
            axis 0 is :meth:`loss_and_grad`'s gradient.
        """
        xa, ya = self._check(params, x, y)
        _, cache = self._backward(params, xa, ya)
        return self._per_example(params, cache)

    def accuracy(self, params: Params, x: Any, y: Any) -> float:
        """Fraction of examples whose largest logit is at their label (``n >= 1``)."""
        xa, ya = self._check(params, x, y)
        if ya.size == 0:
            raise ValueError("x and y are empty: the accuracy on no examples is undefined")
        return float(np.mean(self._logits(params, xa).argmax(axis=1) == ya))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.num_params} parameters)"


class MLP(Model):
    """``x -> Linear(in_dim, hidden) -> ReLU -> Linear(hidden, classes)``.

    Parameters ``"w1"`` (in_dim, hidden), ``"b1"`` (hidden,), ``"w2"`` (hidden, classes),
    ``"b2"`` (classes,); the logits are ``relu(x w1 + b1) w2 + b2``.

    Parameters
    ----------
    in_dim, hidden, classes : int
        Layer widths (``classes >= 2``).
    """

    def __init__(self, in_dim: int, hidden: int, classes: int) -> None:
        self.in_dim = _pos_int(in_dim, "in_dim")
        self.hidden = _pos_int(hidden, "hidden")
        self.num_classes = _pos_int(classes, "classes")
        if self.num_classes < 2:
            raise ValueError(f"classes must be >= 2, got {classes}")
        self.name = f"mlp-{self.in_dim}-{self.hidden}-{self.num_classes}"
        self._shapes = {
            "w1": (self.in_dim, self.hidden),
            "b1": (self.hidden,),
            "w2": (self.hidden, self.num_classes),
            "b2": (self.num_classes,),
        }

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    def _fan_in(self, name: str) -> int:
        return self.in_dim if name in ("w1", "b1") else self.hidden

    def _logits(self, params: Params, x: np.ndarray) -> np.ndarray:
        h = np.maximum(x @ params["w1"] + params["b1"], 0)
        return h @ params["w2"] + params["b2"]

    def _backward(self, params: Params, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, tuple]:
        pre = x @ params["w1"] + params["b1"]
        a = np.maximum(pre, 0)
        losses, dz = _softmax_xent(a @ params["w2"] + params["b2"], y)
        dh = (dz @ params["w2"].T) * (pre > 0)
        return losses, (x, a, dh, dz)

    def _weighted_grad(self, params: Params, cache: tuple, w: np.ndarray | float) -> Params:
        x, a, dh, dz = cache
        return {"w1": _wsum_outer(x, dh, w), "b1": _wsum(dh, w), "w2": _wsum_outer(a, dz, w), "b2": _wsum(dz, w)}

    def _per_example(self, params: Params, cache: tuple) -> Params:
        x, a, dh, dz = cache
        return {
            "w1": np.einsum("ni,nj->nij", x, dh),
            "b1": dh.copy(),
            "w2": np.einsum("ni,nj->nij", a, dz),
            "b2": dz.copy(),
        }

    def _sq_norms(self, params: Params, cache: tuple) -> np.ndarray:
        x, a, dh, dz = cache
        # |u v^T|^2 = |u|^2 |v|^2, and each bias gradient is the matching v.
        return (np.einsum("ni,ni->n", x, x) + 1) * np.einsum("ni,ni->n", dh, dh) + (
            np.einsum("ni,ni->n", a, a) + 1
        ) * np.einsum("ni,ni->n", dz, dz)


class SoftmaxRegression(Model):
    """Multinomial logistic regression: logits ``x w + b``.

    Parameters ``"w"`` (in_dim, classes) and ``"b"`` (classes,).

    Parameters
    ----------
    in_dim, classes : int
        Feature dimension and number of classes (``classes >= 2``).
    """

    def __init__(self, in_dim: int, classes: int) -> None:
        self.in_dim = _pos_int(in_dim, "in_dim")
        self.num_classes = _pos_int(classes, "classes")
        if self.num_classes < 2:
            raise ValueError(f"classes must be >= 2, got {classes}")
        self.name = f"softmax-{self.in_dim}-{self.num_classes}"
        self._shapes = {"w": (self.in_dim, self.num_classes), "b": (self.num_classes,)}

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    def _fan_in(self, name: str) -> int:
        return self.in_dim

    def _logits(self, params: Params, x: np.ndarray) -> np.ndarray:
        return x @ params["w"] + params["b"]

    def _backward(self, params: Params, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, tuple]:
        losses, dz = _softmax_xent(x @ params["w"] + params["b"], y)
        return losses, (x, dz)

    def _weighted_grad(self, params: Params, cache: tuple, w: np.ndarray | float) -> Params:
        x, dz = cache
        return {"w": _wsum_outer(x, dz, w), "b": _wsum(dz, w)}

    def _per_example(self, params: Params, cache: tuple) -> Params:
        x, dz = cache
        return {"w": np.einsum("ni,nj->nij", x, dz), "b": dz.copy()}

    def _sq_norms(self, params: Params, cache: tuple) -> np.ndarray:
        x, dz = cache
        return (np.einsum("ni,ni->n", x, x) + 1) * np.einsum("ni,ni->n", dz, dz)


# --------------------------------------------------------------------------- parameter vectors


def flatten(params: Params) -> np.ndarray:
    """All tensors of ``params`` as one float64 vector, in the dict's (fixed) name order."""
    if not isinstance(params, dict) or not params:
        raise TypeError("params must be a non-empty dict of arrays")
    return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in params.values()])


def unflatten(vector: Any, like: Params) -> Params:
    """Cut ``vector`` into float32 tensors of the names and shapes of ``like`` (inverse of :func:`flatten`)."""
    if not isinstance(like, dict) or not like:
        raise TypeError("like must be a non-empty dict of arrays")
    v = np.asarray(vector)
    sizes = [int(np.size(t)) for t in like.values()]
    if v.ndim != 1 or v.size != sum(sizes):
        raise ValueError(f"vector must be 1-D of length {sum(sizes)}, got shape {v.shape}")
    out: Params = {}
    start = 0
    for (k, t), size in zip(like.items(), sizes):
        out[k] = v[start : start + size].astype(np.float32).reshape(np.shape(t))
        start += size
    return out


def _copy(params: Params) -> Params:
    return {k: v.copy() for k, v in params.items()}


# --------------------------------------------------------------------------- local training


def client_batches(indices: Any, epochs: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Minibatches of a client's sample indices for ``epochs`` epochs.

    Every epoch a fresh permutation of ``indices`` (from ``rng``) is cut into consecutive
    batches of ``batch_size``, the last one possibly shorter; the same draws as ``dprec demo``,
    so the same generator state gives the demo's minibatch order.

    Parameters
    ----------
    indices : array_like of int, shape (m,)
        The client's sample indices (``m >= 1``).
    epochs, batch_size : int
    rng : numpy.random.Generator

    Returns
    -------
    list of numpy.ndarray
        int64 index arrays, ``epochs * ceil(m / batch_size)`` of them.
    """
    idx = np.asarray(indices)
    if idx.ndim != 1 or idx.size == 0:
        raise ValueError(f"indices must be a non-empty 1-D array, got shape {idx.shape}")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    epochs = _pos_int(epochs, "epochs")
    batch_size = _pos_int(batch_size, "batch_size")
    _generator(rng, "rng")
    batches = []
    for _ in range(epochs):
        perm = idx[rng.permutation(idx.size)]
        for i in range(0, perm.size, batch_size):
            batches.append(perm[i : i + batch_size])
    return batches


def local_sgd(model: Model, params: Params, x: Any, y: Any, batches: list[np.ndarray], lr: float) -> Params:
    """Plain minibatch SGD from a copy of ``params``: one step ``p -= lr * grad`` per batch.

    Parameters
    ----------
    model : Model
    params : dict of str to numpy.ndarray
        Left unchanged.
    x, y : numpy.ndarray
        The arrays ``batches`` index into (typically the whole training set).
    batches : list of numpy.ndarray
        Index arrays, e.g. from :func:`client_batches`; an empty batch is skipped.
    lr : float
        Learning rate, > 0.

    Returns
    -------
    dict of str to numpy.ndarray
        The parameters after the last step (new arrays).
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be a Model, got {type(model).__name__}")
    dtype = model._check_params(params)
    xa = model._check_x(x, dtype)
    ya = model._check_y(y, xa.shape[0])
    lr = _pos_float(lr, "lr")
    if not isinstance(batches, (list, tuple)):
        raise TypeError(f"batches must be a list of index arrays, got {type(batches).__name__}")
    p = _copy(params)
    step = dtype.type(lr)
    for idx in batches:
        if len(idx) == 0:
            continue  # no examples, no mean gradient
        _, g = model._loss_and_grad(p, xa[idx], ya[idx])
        for k in p:
            p[k] -= step * g[k]
    return p


def dp_sgd_local(
    model: Model,
    params: Params,
    x: Any,
    y: Any,
    *,
    steps: int,
    sampling_rate: float,
    clip: float,
    noise_stddev: float,
    lr: float,
    data_rng: np.random.Generator,
    noise_rng: np.random.Generator,
) -> Params:
    """DP-SGD on one client's own data (local example-level DP in the style of Heikkila et al.).

    Every step: each example joins the batch independently with probability ``q =
    sampling_rate`` (``data_rng``); every joined example's whole gradient (all tensors
    together) is clipped to L2 norm ``clip``; the clipped gradients are summed,
    ``N(0, noise_stddev^2)`` is added to every coordinate (``noise_rng``), and the result is
    divided by the EXPECTED batch size ``q * len(x)``, not the drawn one, so that the noise's
    scale does not depend on the data. Then ``p -= lr * that``. A step whose sample is empty
    still adds the noise and steps: the accounting of the Poisson-sampled Gaussian mechanism
    counts every step.

    Parameters
    ----------
    model : Model
    params : dict of str to numpy.ndarray
        Left unchanged.
    x, y : numpy.ndarray
        This client's examples (at least one) and labels.
    steps : int
        Number of noisy steps, >= 1.
    sampling_rate : float
        ``q`` in (0, 1].
    clip : float
        Per-example clipping norm, > 0.
    noise_stddev : float
        Standard deviation of the noise added to the clipped sum, >= 0 (``z * clip`` for noise
        multiplier ``z``).
    lr : float
        Learning rate, > 0.
    data_rng : numpy.random.Generator
        Draws the Poisson samples.
    noise_rng : numpy.random.Generator
        Draws the noise; the caller passes one seeded from OS entropy (``default_rng()``).

    Returns
    -------
    dict of str to numpy.ndarray
        The parameters after ``steps`` steps (new arrays).
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be a Model, got {type(model).__name__}")
    dtype = model._check_params(params)
    xa = model._check_x(x, dtype)
    ya = model._check_y(y, xa.shape[0])
    n = ya.size
    if n == 0:
        raise ValueError("x and y are empty: DP-SGD needs at least one example")
    steps = _pos_int(steps, "steps")
    q = _pos_float(sampling_rate, "sampling_rate")
    if q > 1.0:
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate}")
    c = _pos_float(clip, "clip")
    sd = _nonneg_float(noise_stddev, "noise_stddev")
    lr = _pos_float(lr, "lr")
    _generator(data_rng, "data_rng")
    _generator(noise_rng, "noise_rng")

    p = _copy(params)
    scale = dtype.type(lr / (q * n))
    tiny = np.finfo(dtype).tiny
    for _ in range(steps):
        idx = np.flatnonzero(data_rng.random(n) < q)
        if idx.size:
            losses, cache = model._backward(p, xa[idx], ya[idx])
            norms = np.sqrt(model._sq_norms(p, cache))
            # min(1, C / |g_i|); the floor keeps a zero gradient from dividing by zero.
            factors = np.minimum(1, c / np.maximum(norms, tiny)).astype(dtype, copy=False)
            total = model._weighted_grad(p, cache, factors)
        else:
            total = {k: np.zeros_like(v) for k, v in p.items()}
        for k in p:
            if sd > 0.0:
                total[k] += noise_rng.normal(0.0, sd, size=p[k].shape).astype(dtype, copy=False)
            p[k] -= scale * total[k]
    return p
