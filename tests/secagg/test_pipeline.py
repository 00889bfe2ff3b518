"""The DDG and Skellam SecAgg pipelines (dprec.secagg): parameters, calibration, end to end.

The end-to-end tests estimate the mean of 1000 clients' vectors of d = 10,000 and compare the
squared error with its closed form: the noise term ``gamma^2 d rows Var / n`` (isotropic noise
through an orthonormal rotation), the rounding term from the clients' own fractional parts,
and, with a sketch, the sketch's own error on the noiseless sum (the expectation of which is
Chen et al.'s ``(d-1) ||mu||^2 / m``). The report also gives ``MSE n^2 eps^2 / (c^2 d)``, the
constant of Theorem 5.2's ``O(c^2 d / (n^2 eps^2))``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprec import secagg
from dprec.accounting import discrete as acct

N_CLIENTS = 1000
DIM = 10_000
CLIP = 1.0


def _clients(seed: int) -> np.ndarray:
    """1000 update vectors of norm <= CLIP: a common direction plus client-specific parts."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(DIM)
    base *= 0.5 / np.linalg.norm(base)
    parts = rng.standard_normal((N_CLIENTS, DIM))
    parts *= (0.4 * rng.uniform(0.5, 1.0, size=(N_CLIENTS, 1))) / np.linalg.norm(parts, axis=1, keepdims=True)
    x = base + parts
    assert np.all(np.linalg.norm(x, axis=1) <= CLIP)
    return x


def _noiseless_sketch_estimate(pipe: secagg.DistributedPipeline, xs: np.ndarray) -> np.ndarray:
    """What the sketch alone gives: the decode of the sum of the clients' (re-clipped) sketches."""
    total = sum(pipe.clip_and_sketch(x) for x in xs)
    return np.asarray(pipe.sketch.decode(total.reshape(pipe.sketch.shape))) / len(xs)


def run_mean_estimation(cls, *, sketch=None, bits=20, target_epsilon=2.0, seed=7):
    """One round, 1000 clients: (measured MSE, closed-form MSE, pipeline, Theorem 5.2 constant)."""
    xs = _clients(seed)
    mu = xs.mean(axis=0)
    pipe = cls(DIM, clip=CLIP, bits=bits, num_clients=N_CLIENTS, seed=1234 + seed, target_epsilon=target_epsilon,
               delta=1e-5, sketch=sketch, wrap_probability=1e-10)
    rng = np.random.default_rng(seed)
    messages = np.empty((N_CLIENTS, pipe.padded_dim), dtype=pipe.message_dtype)
    rounding_variance = 0.0
    for i, x in enumerate(xs):
        y = pipe.prepare(x)
        f = y - np.floor(y)
        rounding_variance += float(np.sum(f * (1.0 - f)))
        messages[i] = pipe.encode(x, rng=rng)
    total = pipe.aggregate(messages)
    est = np.asarray(pipe.decode(total))
    measured = float(np.sum((est - mu) ** 2))
    closed = pipe.noise_mse() + pipe.rounding_mse(rounding_variance)
    if sketch is not None:
        closed += float(np.sum((_noiseless_sketch_estimate(pipe, xs) - mu) ** 2))
    eps = pipe.concentrated_epsilon()
    constant = measured * N_CLIENTS**2 * eps**2 / (CLIP**2 * DIM)
    return measured, closed, pipe, constant


@pytest.mark.parametrize("cls", [secagg.DDGPipeline, secagg.SkellamPipeline], ids=["ddg", "skellam"])
@pytest.mark.parametrize("sketch", [None, (4, 2048)], ids=["no-sketch", "sketch-4x2048"])
def test_mean_estimation_matches_the_closed_form(cls, sketch):
    measured, closed, pipe, constant = run_mean_estimation(cls, sketch=sketch)
    # Without a sketch the error is a sum over ~10^4 nearly independent coordinates (relative
    # standard deviation ~ sqrt(2/d) = 1.4%); a sketch correlates the coordinates that share a
    # cell (~ sqrt(2/m) of the noise part). 6% and 10% are about 4 standard deviations.
    tolerance = 0.06 if sketch is None else 0.10
    assert abs(measured / closed - 1.0) < tolerance, (measured, closed, pipe)
    assert pipe.epsilon() <= 2.0 + 1e-9
    assert pipe.any_wrap_probability < 1e-4
    assert 0.0 < constant < 100.0


def test_sketch_error_expectation_is_chen_et_al():
    """Over sketch seeds, the sketch's own error averages (d-1)||mu||^2 / m (docs/secagg.md)."""
    xs = _clients(3)[:50]
    mu = xs.mean(axis=0)
    errors = []
    for s in range(12):
        pipe = secagg.DDGPipeline(DIM, clip=CLIP, bits=24, num_clients=50, seed=s, noise_stddev=0.1, sketch=(4, 512))
        errors.append(float(np.sum((_noiseless_sketch_estimate(pipe, xs) - mu) ** 2)))
    expected = (DIM - 1) * float(np.sum(mu**2)) / (4 * 512)
    assert abs(np.mean(errors) / expected - 1.0) < 0.25


# ---- parameters ------------------------------------------------------------------------------


def test_bits_per_client_and_padding():
    pipe = secagg.DDGPipeline(10_000, clip=1.0, bits=16, num_clients=100, seed=1, noise_stddev=0.5)
    assert pipe.padded_dim == 16384
    assert pipe.bits_per_client == 16384 * 16
    assert pipe.message_dtype == np.uint32
    sk = secagg.DDGPipeline(10_000, clip=1.0, bits=40, num_clients=100, seed=1, noise_stddev=0.5, sketch=(3, 1000))
    assert sk.padded_dim == 4096 and sk.message_dtype == np.uint64 and sk.bits_per_client == 4096 * 40


@pytest.mark.parametrize("bits", [8, 12, 16, 20, 32, 48, 64])
def test_scale_keeps_k_standard_deviations_inside_the_modulus(bits):
    pipe = secagg.DDGPipeline(4096, clip=1.0, bits=bits, num_clients=100, seed=1, noise_stddev=0.02)
    k_sd = pipe.stddevs_of_headroom * pipe.aggregate_stddev()
    assert k_sd <= 2.0 ** (bits - 1) * (1 + 1e-9)
    if pipe.integer_noise_stddev < secagg.MAX_INTEGER_NOISE_STDDEV * (1 - 1e-9):
        # The largest such scale (the scale takes Var = sigma^2, which a discrete Gaussian of
        # small sigma slightly undershoots, so the exact standard deviation may be a little less).
        assert k_sd >= 2.0 ** (bits - 1) * 0.99
    assert pipe.wrap_probability <= 1e-6 * (1 + 1e-6)


def test_small_bit_widths_fail_clearly():
    """TFF's heuristic scale misbehaves at small bit widths; here the rounding term is accounted for."""
    with pytest.raises(ValueError, match="bits=4 is too few for num_clients=1000"):
        secagg.DDGPipeline(1000, clip=1.0, bits=4, num_clients=1000, seed=1, noise_stddev=1.0)
    ok = secagg.DDGPipeline(1000, clip=1.0, bits=10, num_clients=10, seed=1, noise_stddev=1.0)
    assert ok.granularity > 0 and ok.wrap_probability < 1e-5


@pytest.mark.parametrize("cls", [secagg.DDGPipeline, secagg.SkellamPipeline], ids=["ddg", "skellam"])
def test_calibration_hits_the_target_with_the_gamma_used(cls):
    pipe = cls(5000, clip=0.5, bits=16, num_clients=200, seed=1, target_epsilon=3.0, delta=1e-6, steps=10,
               sampling_rate=0.1)
    eps = pipe.epsilon()
    assert eps <= 3.0 + 1e-9 and eps > 2.9
    # The noise is what the accounting certifies at the pipeline's own gamma and sensitivity.
    fn = acct.ddg_epsilon if cls is secagg.DDGPipeline else acct.skellam_epsilon
    again = fn(l2_sensitivity=acct.rounded_l2_sensitivity(0.5, pipe.padded_dim, pipe.granularity, math.exp(-0.5)),
               noise_stddev=pipe.noise_stddev, num_clients=200, dim=pipe.padded_dim, delta=1e-6, steps=10,
               sampling_rate=0.1, granularity=pipe.granularity, threat_model="server")[0]
    assert again == pytest.approx(eps, rel=1e-12)
    # The scale is the one the noise implies (fixed point of the calibration).
    assert pipe.stddevs_of_headroom * pipe.aggregate_stddev() == pytest.approx(2.0**15, rel=1e-6)


@pytest.mark.parametrize("cls", [secagg.DDGPipeline, secagg.SkellamPipeline], ids=["ddg", "skellam"])
def test_privacy_event_composes_to_the_same_epsilon(cls):
    from dprec.accounting import DISCRETE_DEFAULT_ORDERS, Accountant

    pipe = cls(3000, clip=0.5, bits=18, num_clients=100, seed=1, target_epsilon=4.0, delta=1e-6, steps=20,
               sampling_rate=0.2, threat_model="central")
    # Without a threat model the Accountant composes the event's own curve: the central (amplified) one.
    acc = Accountant(orders=DISCRETE_DEFAULT_ORDERS).compose(pipe.privacy_event(), count=20)
    assert acc.get_epsilon(1e-6, method="mironov") == pytest.approx(pipe.epsilon(), rel=1e-9)
    # Against the server the Accountant composes the participation mixture, as the pipeline does.
    event = pipe.privacy_event()
    a = DISCRETE_DEFAULT_ORDERS
    curves = event.curves(a, "server", "zero")
    full = (acct.ddg_rdp if cls is secagg.DDGPipeline else acct.skellam_rdp)(a, **{**event.params, "sampling_rate": 1.0})
    mixture = np.logaddexp(math.log1p(-0.2), math.log(0.2) + (a - 1.0) * full) / (a - 1.0)
    assert np.allclose(curves[0], mixture, rtol=1e-12) and np.array_equal(curves[0], curves[1])
    server = acct.rdp_to_epsilon(a, 20 * mixture, 1e-6, method="mironov")[0]
    assert server == pytest.approx(pipe.epsilon(threat_model="server"), rel=1e-9) and server > pipe.epsilon()


@pytest.mark.parametrize("cls", [secagg.DDGPipeline, secagg.SkellamPipeline], ids=["ddg", "skellam"])
def test_epsilon_states_the_threat_model(cls):
    # Secure aggregation reveals only the modular sum: a guarantee against every observer under zero-out;
    # add/remove has none (removing a client removes its share of the noise).
    pipe = cls(3000, clip=0.5, bits=18, num_clients=100, seed=1, target_epsilon=4.0, delta=1e-6, steps=20,
               sampling_rate=0.2)
    g = pipe.guarantee()
    assert (g.mechanism, g.threat_model, g.relation) == (pipe.mechanism, "server", "zero")
    assert g.epsilon == pytest.approx(pipe.epsilon(), rel=1e-12) and g.epsilons["zero"] == g.epsilon
    assert g.epsilons["add_remove"] == math.inf and "share of the noise" in g.reasons["add_remove"]
    assert "zero" not in g.reasons and "rdp-mironov" in g.conversion
    assert math.isfinite(pipe.epsilon()) and pipe.epsilon() <= 4.0 * (1 + 1e-9)
    # With client sampling only the central observer (the sample hidden) is amplified; the server sees who sent
    # a masked message and a message observer how many: the participation mixture, the same number for both.
    assert pipe.epsilon(threat_model="messages") == pipe.epsilon() > pipe.epsilon(threat_model="central")
    full = cls(3000, clip=0.5, bits=18, num_clients=100, seed=1, target_epsilon=4.0, delta=1e-6, steps=20)
    assert len({full.epsilon(threat_model=tm) for tm in ("central", "messages", "server")}) == 1
    for tm in ("central", "messages", "server"):
        assert pipe.epsilon(threat_model=tm, relation="add_remove") == math.inf
        for rel in ("add_remove", "zero"):
            assert pipe.guarantee(threat_model=tm, relation=rel).threat_model == tm
    assert pipe.guarantee(conversion="rdp-balle").epsilon <= pipe.epsilon()
    with pytest.raises(ValueError, match="threat_model must be one of"):
        pipe.epsilon(threat_model="curious")
    with pytest.raises(ValueError, match="relation must be one of"):
        pipe.guarantee(relation="swap")


def test_with_seed_keeps_the_calibration():
    pipe = secagg.SkellamPipeline(500, clip=1.0, bits=16, num_clients=20, seed=1, target_epsilon=2.0, delta=1e-5,
                                  sketch=(3, 100))
    nxt = pipe.with_seed(2)
    assert (nxt.seed, pipe.seed) == (2, 1) and nxt.sketch.seed == 2 and pipe.sketch.seed == 1
    assert (nxt.noise_stddev, nxt.granularity, nxt.epsilon()) == (pipe.noise_stddev, pipe.granularity, pipe.epsilon())
    fresh = secagg.SkellamPipeline(500, clip=1.0, bits=16, num_clients=20, seed=2, noise_stddev=pipe.noise_stddev,
                                   sketch=(3, 100))
    x = np.linspace(-0.02, 0.03, 500)
    # The same rotation and sketch as a pipeline made with seed 2 (up to the scale, which the
    # fresh pipeline derives from the noise alone, a hair from the calibrated fixed point).
    np.testing.assert_allclose(nxt.prepare(x) * nxt.granularity, fresh.prepare(x) * fresh.granularity, rtol=1e-12)
    assert not np.array_equal(nxt.prepare(x), pipe.prepare(x))
    with pytest.raises(ValueError, match="seed"):
        pipe.with_seed(-1)


def test_more_bits_mean_less_error():
    errs = []
    for bits in (12, 16, 24):
        pipe = secagg.DDGPipeline(2000, clip=1.0, bits=bits, num_clients=100, seed=1, target_epsilon=1.0, delta=1e-5)
        errs.append(pipe.noise_mse() + pipe.rounding_mse(0.25 * pipe.padded_dim * 100))
    assert errs[0] > errs[1] > errs[2]


def test_encode_is_private_and_reproducible_only_with_the_generator():
    pipe = secagg.SkellamPipeline(300, clip=1.0, bits=16, num_clients=10, seed=5, noise_stddev=0.3)
    x = np.linspace(-0.05, 0.05, 300)
    a = pipe.encode(x, rng=np.random.default_rng(1))
    b = pipe.encode(x, rng=np.random.default_rng(1))
    c = pipe.encode(x)
    d = pipe.encode(x)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(c, d)  # OS entropy: fresh private seeds each time
    assert a.dtype == np.uint32 and a.shape == (512,) and int(a.max()) < 2**16


def test_aggregate_accepts_a_list_or_a_stack():
    pipe = secagg.DDGPipeline(100, clip=1.0, bits=12, num_clients=3, seed=5, noise_stddev=0.3)
    msgs = [pipe.encode(np.full(100, 0.01), rng=np.random.default_rng(i)) for i in range(3)]
    np.testing.assert_array_equal(pipe.aggregate(msgs), pipe.aggregate(np.stack(msgs)))
    want = (np.stack(msgs).astype(np.int64).sum(axis=0) % 2**12).astype(np.uint32)
    np.testing.assert_array_equal(pipe.aggregate(msgs), want)


def test_torch_input():
    torch = pytest.importorskip("torch")
    pipe = secagg.DDGPipeline(64, clip=1.0, bits=16, num_clients=1, seed=5, noise_stddev=0.3)
    x = np.linspace(-0.1, 0.1, 64)
    a = pipe.encode(torch.from_numpy(x).float(), rng=np.random.default_rng(2))
    b = pipe.encode(x.astype(np.float32), rng=np.random.default_rng(2))
    np.testing.assert_array_equal(a, b)


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dim=0), "dim"),
        (dict(clip=0.0), "clip"),
        (dict(clip=float("nan")), "clip"),
        (dict(bits=1), "bits"),
        (dict(bits=65), "bits"),
        (dict(num_clients=0), "num_clients"),
        (dict(noise_stddev=-1.0), "noise_stddev"),
        (dict(noise_stddev=None), "exactly one of noise_stddev and target_epsilon"),
        (dict(target_epsilon=1.0), "exactly one"),
        (dict(noise_stddev=None, target_epsilon=1.0, delta=None), "target_epsilon needs delta"),
        (dict(beta=1.0), "beta"),
        (dict(wrap_probability=0.0), "wrap_probability"),
        (dict(sampling_rate=1.5), "sampling_rate"),
        (dict(sketch=(0, 10)), "rows"),
        (dict(sketch=5), "sketch"),
    ],
)
def test_bad_parameters(kwargs, match):
    base = dict(dim=100, clip=1.0, bits=16, num_clients=10, seed=1, noise_stddev=0.5)
    base.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        secagg.DDGPipeline(**base)


def test_bad_client_input():
    pipe = secagg.DDGPipeline(100, clip=1.0, bits=16, num_clients=10, seed=1, noise_stddev=0.5)
    with pytest.raises(ValueError, match="x"):
        pipe.encode(np.zeros(99))
    with pytest.raises(ValueError, match="x"):
        pipe.encode(np.full(100, np.nan))
    with pytest.raises(TypeError, match="x"):
        pipe.encode(np.zeros(100, dtype=np.int64))
    with pytest.raises(TypeError, match="rng"):
        pipe.encode(np.zeros(100), rng=3)


def test_building_blocks_need_no_scipy():
    """The samplers, rounding and modular arithmetic import without SciPy; the pipelines need it."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['scipy'] = None\n"
        "import numpy as np, dprec.secagg as s\n"
        "x = s.sample_discrete_gaussian(10, 2.0, rng=np.random.default_rng(0))\n"
        "print(s.modular_reduce(x, 8).dtype)\n"
        "try:\n    s.DDGPipeline\nexcept ImportError:\n    print('pipelines need scipy')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["uint32", "pipelines", "need", "scipy"]


def test_sampled_rounds_need_the_fixed_share_count():
    # With client sampling, the sum is decoded by the pipeline's num_clients (a drawn count would reveal who took
    # part); a drawn client beyond the share holders sends its rounded vector without a share.
    pipe = secagg.DDGPipeline(64, clip=1.0, bits=18, num_clients=4, seed=3, noise_stddev=0.5, delta=1e-5,
                              sampling_rate=0.1)
    x = np.full(64, 0.05)
    total = pipe.aggregate(np.stack([pipe.encode(x) for _ in range(4)]))
    with pytest.raises(ValueError, match="num_clients=5"):
        pipe.decode(total, num_clients=5)
    assert pipe.decode(total, num_clients=4).shape == (64,)
    # add_noise=False: the same rounding, no share, so the lifted word is the rounded vector itself.
    quiet = secagg.centered_lift(pipe.encode(x, add_noise=False), 18, scale=1.0, dtype=np.float64)
    assert np.max(np.abs(quiet - pipe.prepare(x))) <= 1.0 + 1e-9
    noisy = secagg.centered_lift(pipe.encode(x), 18, scale=1.0, dtype=np.float64)
    assert np.std(noisy - pipe.prepare(x)) > 10 * np.std(quiet - pipe.prepare(x))
    # Without sampling any count may be used (e.g. a dropout-robust decode).
    full = secagg.DDGPipeline(64, clip=1.0, bits=18, num_clients=4, seed=3, noise_stddev=0.5)
    assert full.decode(total, num_clients=5).shape == (64,)
