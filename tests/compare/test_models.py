"""Tests of ``dprec compare``'s NumPy building blocks (python/dprec/compare/models.py and federations.py):
exact gradients, per-example gradients, local SGD and DP-SGD, and the two federated datasets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprec.compare import federations as fed
from dprec.compare.models import (
    MLP,
    SoftmaxRegression,
    client_batches,
    dp_sgd_local,
    flatten,
    local_sgd,
    unflatten,
)

MODELS = {
    "mlp": lambda: MLP(6, 5, 4),
    "softmax": lambda: SoftmaxRegression(6, 4),
}


def _data(n: int = 13, dim: int = 6, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)), rng.integers(0, classes, size=n)


def _params(model, dtype=np.float64, seed: int = 1) -> dict[str, np.ndarray]:
    # Scaled up from the default init so that the loss is far from flat and the ReLUs are mixed.
    return {k: (3 * v).astype(dtype) for k, v in model.init_params(np.random.default_rng(seed)).items()}


def _norm(params: dict[str, np.ndarray]) -> float:
    return float(np.linalg.norm(flatten(params)))


def _diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: a[k].astype(np.float64) - b[k].astype(np.float64) for k in a}


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("kind", MODELS)
def test_gradient_matches_central_finite_differences(kind):
    model = MODELS[kind]()
    x, y = _data()
    params = _params(model)
    loss, grad = model.loss_and_grad(params, x, y)
    assert all(g.dtype == np.float64 and g.shape == params[k].shape for k, g in grad.items())
    h = 1e-6
    for k, p in params.items():
        num = np.empty_like(p)
        for i in np.ndindex(p.shape):
            plus = {kk: vv.copy() for kk, vv in params.items()}
            minus = {kk: vv.copy() for kk, vv in params.items()}
            plus[k][i] += h
            minus[k][i] -= h
            num[i] = (model.loss(plus, x, y) - model.loss(minus, x, y)) / (2 * h)
        np.testing.assert_allclose(grad[k], num, rtol=1e-6, atol=1e-8, err_msg=k)
    assert loss == pytest.approx(model.loss(params, x, y), rel=1e-12)


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_per_example_grads_average_to_the_batch_gradient(kind, dtype):
    model = MODELS[kind]()
    x, y = _data(n=9)
    params = _params(model, dtype)
    per = model.per_example_grads(params, x, y)
    _, grad = model.loss_and_grad(params, x, y)
    assert list(per) == list(params)
    for k, p in params.items():
        assert per[k].shape == (9, *p.shape) and per[k].dtype == dtype
        np.testing.assert_allclose(per[k].mean(axis=0), grad[k], rtol=1e-5, atol=1e-6)
    # Every example's own gradient is the batch gradient of that example alone.
    _, g3 = model.loss_and_grad(params, x[3:4], y[3:4])
    for k in params:
        np.testing.assert_allclose(per[k][3], g3[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", MODELS)
def test_float32_math_stays_float32_and_is_stable(kind):
    model = MODELS[kind]()
    x, y = _data()
    params = _params(model, np.float32)
    assert model.logits(params, x).dtype == np.float32
    _, grad = model.loss_and_grad(params, x, y)
    assert all(g.dtype == np.float32 for g in grad.values())
    # Logits of 1e4: a naive softmax overflows; the shifted one gives a finite loss and gradient.
    big = {k: v * np.float32(1e4) for k, v in params.items()}
    loss, grad = model.loss_and_grad(big, x, y)
    assert math.isfinite(loss) and all(np.all(np.isfinite(g)) for g in grad.values())


def test_shapes_names_and_init():
    mlp = MLP(64, 32, 10)
    assert mlp.name == "mlp-64-32-10" and mlp.num_params == 64 * 32 + 32 + 32 * 10 + 10 == 2410
    sm = SoftmaxRegression(20, 5)
    assert sm.name == "softmax-20-5" and sm.num_params == 105
    p = mlp.init_params(np.random.default_rng([0, 1]))
    assert list(p) == ["w1", "b1", "w2", "b2"]
    assert {k: v.shape for k, v in p.items()} == mlp.param_shapes
    assert all(v.dtype == np.float32 for v in p.values())
    # PyTorch's nn.Linear default, drawn in its (out, in) layout and order: the demo's initial model.
    rng = np.random.default_rng([0, 1])
    np.testing.assert_array_equal(p["w1"], rng.uniform(-1 / 8, 1 / 8, size=(32, 64)).T.astype(np.float32))
    np.testing.assert_array_equal(p["b1"], rng.uniform(-1 / 8, 1 / 8, size=32).astype(np.float32))
    bound = 1 / math.sqrt(32)
    assert np.abs(p["w2"]).max() <= bound and np.abs(p["b2"]).max() <= bound
    assert list(sm.init_params(np.random.default_rng(0))) == ["w", "b"]


def test_accuracy():
    model = SoftmaxRegression(2, 2)
    params = {"w": np.array([[1.0, -1.0], [0.0, 0.0]], np.float32), "b": np.zeros(2, np.float32)}
    x = np.array([[1.0, 0.0], [-1.0, 0.0], [2.0, 0.0], [-2.0, 0.0]])
    assert model.accuracy(params, x, np.array([0, 1, 0, 0])) == 0.75


def test_flatten_unflatten_round_trip():
    model = MLP(3, 4, 2)
    p = model.init_params(np.random.default_rng(0))
    v = flatten(p)
    assert v.dtype == np.float64 and v.shape == (model.num_params,)
    np.testing.assert_array_equal(v[:12], p["w1"].ravel())  # the fixed name order
    back = unflatten(v, p)
    assert list(back) == list(p)
    assert all(back[k].dtype == np.float32 and np.array_equal(back[k], p[k]) for k in p)
    with pytest.raises(ValueError, match="vector"):
        unflatten(v[:-1], p)


def test_model_argument_checks():
    model = MLP(6, 5, 4)
    x, y = _data()
    p = model.init_params(np.random.default_rng(0))
    with pytest.raises(ValueError, match="params"):
        model.loss_and_grad({"w1": p["w1"]}, x, y)
    with pytest.raises(ValueError, match="x must have shape"):
        model.loss_and_grad(p, x[:, :5], y)
    with pytest.raises(ValueError, match="y must have shape"):
        model.loss_and_grad(p, x, y[:-1])
    with pytest.raises(ValueError, match="y must be class labels"):
        model.loss_and_grad(p, x, np.full(y.size, 4))
    with pytest.raises(TypeError, match="y must be integers"):
        model.loss_and_grad(p, x, y.astype(float))
    with pytest.raises(TypeError, match="hidden"):
        MLP(6, 5.0, 4)
    with pytest.raises(ValueError, match="classes"):
        SoftmaxRegression(6, 1)


# --------------------------------------------------------------------------- local training


def test_client_batches():
    idx = np.array([3, 8, 10, 11, 20, 21, 30], dtype=np.int64)
    b = client_batches(idx, 2, 3, np.random.default_rng(5))
    assert [len(t) for t in b] == [3, 3, 1, 3, 3, 1]
    for epoch in (b[:3], b[3:]):
        assert np.array_equal(np.sort(np.concatenate(epoch)), idx)
    assert all(t.dtype == np.int64 for t in b)
    again = client_batches(idx, 2, 3, np.random.default_rng(5))
    assert all(np.array_equal(s, t) for s, t in zip(b, again))
    with pytest.raises(ValueError, match="batch_size"):
        client_batches(idx, 1, 0, np.random.default_rng(0))
    with pytest.raises(TypeError, match="epochs"):
        client_batches(idx, 1.0, 2, np.random.default_rng(0))


def test_local_sgd_reduces_the_loss_and_leaves_its_input():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=60)
    centres = np.array([[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0]])
    x = (centres[y] + 0.5 * rng.standard_normal((60, 2))).astype(np.float32)  # separable
    for model in (MLP(2, 8, 3), SoftmaxRegression(2, 3)):
        p0 = model.init_params(np.random.default_rng(1))
        keep = {k: v.copy() for k, v in p0.items()}
        batches = client_batches(np.arange(60), 5, 10, np.random.default_rng(2))
        p1 = local_sgd(model, p0, x, y, batches, 0.1)
        assert all(np.array_equal(p0[k], keep[k]) for k in p0)
        assert all(p1[k].dtype == np.float32 for k in p1)
        assert model.loss(p1, x, y) < 0.5 * model.loss(p0, x, y)
        assert model.accuracy(p1, x, y) == 1.0
        # No batches: an unchanged copy.
        p2 = local_sgd(model, p0, x, y, [], 0.1)
        assert all(np.array_equal(p2[k], p0[k]) and p2[k] is not p0[k] for k in p0)


def _gd(model, params, x, y, steps, lr):
    p = {k: v.copy() for k, v in params.items()}
    for _ in range(steps):
        _, g = model.loss_and_grad(p, x, y)
        p = {k: p[k] - lr * g[k] for k in p}
    return p


@pytest.mark.parametrize("kind", MODELS)
def test_dp_sgd_without_noise_clipping_or_sampling_is_gradient_descent(kind):
    model = MODELS[kind]()
    x, y = _data()
    params = _params(model, np.float64)
    keep = {k: v.copy() for k, v in params.items()}
    out = dp_sgd_local(model, params, x, y, steps=4, sampling_rate=1.0, clip=1e9, noise_stddev=0.0, lr=0.05,
                       data_rng=np.random.default_rng(0), noise_rng=np.random.default_rng(1))
    ref = _gd(model, params, x, y, 4, 0.05)
    assert all(np.array_equal(params[k], keep[k]) for k in params)
    for k in params:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", MODELS)
def test_dp_sgd_clips_every_example(kind):
    """One full-batch step equals ``-lr / n * sum_i min(1, C / |g_i|) g_i`` from the explicit per-example
    gradients (the norms computed without them agree), and some examples are clipped, some not."""
    model = MODELS[kind]()
    x, y = _data()
    params = _params(model, np.float64)
    per = model.per_example_grads(params, x, y)
    norms = np.sqrt(sum(np.sum(g.reshape(len(y), -1) ** 2, axis=1) for g in per.values()))
    clip = float(np.median(norms))
    assert (norms > clip).any() and (norms < clip).any()
    factor = np.minimum(1.0, clip / norms)
    out = dp_sgd_local(model, params, x, y, steps=1, sampling_rate=1.0, clip=clip, noise_stddev=0.0, lr=0.3,
                       data_rng=np.random.default_rng(0), noise_rng=np.random.default_rng(1))
    for k, p in params.items():
        expected = p - 0.3 / len(y) * np.tensordot(factor, per[k], axes=1)
        np.testing.assert_allclose(out[k], expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", MODELS)
def test_dp_sgd_step_is_bounded_by_the_clip(kind):
    model = MODELS[kind]()
    x, y = _data(n=20)
    params = _params(model, np.float32)
    lr, clip, q = 0.5, 1e-3, 0.3
    data_rng = np.random.default_rng(7)
    for _ in range(10):
        nxt = dp_sgd_local(model, params, x, y, steps=1, sampling_rate=q, clip=clip, noise_stddev=0.0, lr=lr,
                           data_rng=data_rng, noise_rng=np.random.default_rng(0))
        # |sum of <= n clipped gradients| / (q n) <= C / q.
        assert _norm(_diff(nxt, params)) <= lr * clip / q * (1 + 1e-5)
        params = nxt


def test_dp_sgd_noise_scale_and_empty_samples():
    model = MLP(6, 5, 4)
    x, y = _data(n=20)
    params = _params(model, np.float64)
    kw = dict(steps=1, clip=1.0, lr=0.1, data_rng=np.random.default_rng(3))
    # An empty sample (q tiny) still steps with the noise, divided by the expected batch size q n ...
    q, sd = 1e-6, 1e-4
    out = dp_sgd_local(model, params, x, y, sampling_rate=q, noise_stddev=sd, noise_rng=np.random.default_rng(4),
                       **kw)
    step = flatten(_diff(out, params))
    assert np.std(step) == pytest.approx(0.1 * sd / (q * 20), rel=0.1)  # 169 coordinates
    # ... and without noise it leaves the parameters where they were.
    out0 = dp_sgd_local(model, params, x, y, sampling_rate=q, noise_stddev=0.0, noise_rng=np.random.default_rng(4),
                        **kw)
    assert all(np.array_equal(out0[k], params[k]) for k in params)
    with pytest.raises(ValueError, match="sampling_rate"):
        dp_sgd_local(model, params, x, y, sampling_rate=1.5, noise_stddev=0.0, noise_rng=np.random.default_rng(),
                     **kw)
    with pytest.raises(ValueError, match="noise_stddev"):
        dp_sgd_local(model, params, x, y, sampling_rate=0.5, noise_stddev=-1.0, noise_rng=np.random.default_rng(),
                     **kw)
    with pytest.raises(TypeError, match="noise_rng"):
        dp_sgd_local(model, params, x, y, sampling_rate=0.5, noise_stddev=1.0, noise_rng=0, **kw)
    with pytest.raises(TypeError, match="steps"):
        dp_sgd_local(model, params, x, y, steps=1.0, sampling_rate=0.5, clip=1.0, noise_stddev=1.0, lr=0.1,
                     data_rng=np.random.default_rng(), noise_rng=np.random.default_rng())


# --------------------------------------------------------------------------- federations


def _check_partition(clients, n):
    assert all(c.size > 0 and c.dtype == np.int64 and np.all(np.diff(c) > 0) for c in clients)
    together = np.concatenate(clients)
    assert together.size == n and np.array_equal(np.sort(together), np.arange(n))


def test_digits_federation():
    pytest.importorskip("sklearn")
    f = fed.digits_federation()
    assert f.name == "digits" and f.num_clients == 100 and f.num_classes == 10
    assert f.x_train.shape == (1437, 64) and f.x_test.shape == (360, 64)
    assert f.x_train.dtype == np.float32 and f.y_train.dtype == np.int64
    assert f.model.name == "mlp-64-32-10"
    assert f.description == (
        "scikit-learn digits, 1,437 train / 360 test images, 100 clients, Dirichlet(0.5) label split"
    )
    _check_partition(f.clients, 1437)
    # The demo's split: dirichlet_split of the training labels with default_rng([seed, 0]).
    ref = fed.dirichlet_split(f.y_train, 100, 0.5, np.random.default_rng([0, 0]))
    assert all(np.array_equal(a, b) for a, b in zip(f.clients, ref))
    g = fed.digits_federation()
    assert np.array_equal(g.x_train, f.x_train) and all(np.array_equal(a, b) for a, b in zip(f.clients, g.clients))
    h = fed.digits_federation(num_clients=20, alpha=100.0, seed=1, hidden=8)
    assert h.num_clients == 20 and h.model.name == "mlp-64-8-10" and not np.array_equal(h.y_train, f.y_train)


@pytest.fixture(scope="module")
def synthetic():
    return fed.synthetic_federation()


def test_synthetic_federation_shape_and_determinism(synthetic):
    f = synthetic
    assert f.name == "synthetic" and f.num_clients == 10_000 and f.num_classes == 5
    assert f.x_train.shape == (200_000, 20) and f.x_test.shape == (5_000, 20)
    assert f.x_train.dtype == np.float32 and f.y_train.dtype == np.int64 and f.y_test.dtype == np.int64
    assert f.model.name == "softmax-20-5"
    assert np.all(f.client_sizes == 20)
    _check_partition(f.clients, 200_000)
    assert 0.80 <= f.bayes_accuracy <= 0.90
    assert f"Bayes accuracy {100 * f.bayes_accuracy:.1f}%" in f.description
    for labels in (f.y_train, f.y_test):
        share = np.bincount(labels, minlength=5) / labels.size
        assert share.min() > 0.05 and share.max() < 0.5
    g = fed.synthetic_federation()
    assert np.array_equal(g.x_train, f.x_train) and np.array_equal(g.y_train, f.y_train)
    assert np.array_equal(g.x_test, f.x_test) and g.bayes_accuracy == f.bayes_accuracy
    # The test set does not depend on how many clients there are; another seed is another task.
    small = fed.synthetic_federation(num_clients=50, samples_per_client=3)
    assert small.x_train.shape == (150, 20) and np.array_equal(small.x_test, f.x_test)
    assert not np.array_equal(fed.synthetic_federation(num_clients=50, seed=1).x_test, f.x_test)


def test_synthetic_federation_clients_are_heterogeneous(synthetic):
    f = synthetic
    means = f.x_train.reshape(10_000, 20, 20).mean(axis=1)  # client k holds rows 20k .. 20k+19
    # Between-client spread of the means: shift variance 0.25 plus 1/20 of the noise's variance.
    assert np.var(means, axis=0).mean() == pytest.approx(0.25 + 1 / 20, rel=0.05)


def test_synthetic_task_is_learnable_to_near_bayes(synthetic):
    f = synthetic
    p = f.model.init_params(np.random.default_rng(0))
    for _ in range(150):
        _, g = f.model.loss_and_grad(p, f.x_train, f.y_train)
        for k in p:
            p[k] -= np.float32(2.0) * g[k]
    assert f.model.accuracy(p, f.x_test, f.y_test) >= f.bayes_accuracy - 0.05


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"num_clients": 0}, ValueError, "num_clients"),
        ({"samples_per_client": 2.0}, TypeError, "samples_per_client"),
        ({"dim": -1}, ValueError, "dim"),
        ({"classes": 1}, ValueError, "classes"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": True}, TypeError, "seed"),
        ({"test_size": 0}, ValueError, "test_size"),
    ],
)
def test_synthetic_federation_bad_arguments(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        fed.synthetic_federation(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"num_clients": 0}, ValueError, "num_clients"),
        ({"num_clients": 1438}, ValueError, "num_clients"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"alpha": "1"}, TypeError, "alpha"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"hidden": 0}, ValueError, "hidden"),
    ],
)
def test_digits_federation_bad_arguments(kwargs, exc, name):
    pytest.importorskip("sklearn")
    with pytest.raises(exc, match=name):
        fed.digits_federation(**kwargs)
