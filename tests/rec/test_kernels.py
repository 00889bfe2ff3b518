"""DP-REC kernels (docs/dprec-rec.md): native against the NumPy reference, and the statistics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import dprec
from dprec import rec
from tests.conftest import BACKENDS, requires_native


def _tolerance(phi: np.ndarray, sigma: float) -> float:
    """The issue's bound for two float64 accumulations in different orders."""
    return 1e-9 * np.sqrt(phi.size) * np.linalg.norm(phi.astype(np.float64)) / sigma


@requires_native
@pytest.mark.parametrize("d", [1, 2, 3, 5, 17, 64, 1000, 4099, 70_001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logits_native_matches_reference(isa, d, dtype, rng):
    bits = 5 if d < 10_000 else 3
    phi = rng.standard_normal(d).astype(dtype)
    sigma = 0.37
    native = rec.logits(phi, 0xDEADBEEF, 3, bits, sigma=sigma, scale=0.5, backend="cpu")
    reference = rec.logits(phi, 0xDEADBEEF, 3, bits, sigma=sigma, scale=0.5, backend="reference")
    assert native.shape == (1 << bits,) and native.dtype == np.float64
    assert np.max(np.abs(native - reference)) <= _tolerance(phi * 0.5, sigma)


@requires_native
def test_logits_identical_for_any_thread_count(threads, rng):
    phi = rng.standard_normal(300_001).astype(np.float32)  # several reduction segments
    results = []
    for n in (1, 2, 3, 5):
        threads(n)
        results.append(rec.logits(phi, 5, 1, 6, sigma=1.0, backend="cpu"))
    for r in results[1:]:
        assert np.array_equal(r.view(np.uint64), results[0].view(np.uint64))


@requires_native
def test_logits_large_k(rng):
    phi = rng.standard_normal(6).astype(np.float32)
    native = rec.logits(phi, 1, 0, 16, sigma=1.0, backend="cpu")
    z = np.stack([dprec.philox.normals(1, 6, substream=k) for k in (0, 1, 12345, 65535)]).astype(np.float64)
    expected = z @ phi.astype(np.float64)
    assert np.allclose(native[[0, 1, 12345, 65535]], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_logits_are_the_likelihood_ratio(backend, rng):
    # l_k = <z_k, phi> / sigma, the log-likelihood ratio log N(sigma z_k; phi, sigma^2) -
    # log N(sigma z_k; 0, sigma^2) up to the constant ||phi||^2 / (2 sigma^2).
    phi = rng.standard_normal(50)
    sigma = 0.8
    lg = rec.logits(phi, 9, 2, 3, sigma=sigma, backend=backend)
    for k in range(8):
        delta = rec.candidate(9, 2, k, 50, sigma=sigma, backend=backend).astype(np.float64)
        log_q = stats.norm.logpdf(delta, loc=phi, scale=sigma).sum()
        log_p = stats.norm.logpdf(delta, loc=0, scale=sigma).sum()
        np.testing.assert_allclose(lg[k] - phi @ phi / (2 * sigma**2), log_q - log_p, rtol=1e-5, atol=1e-5)


@requires_native
def test_same_gumbel_gives_same_index(rng):
    for trial in range(50):
        lg = rng.standard_normal(1 << (trial % 10 + 1)) * 3
        g = rec.gumbel_noise(lg.size, np.random.default_rng(trial))
        assert rec.sample_index(lg, gumbel=g, backend="cpu") == rec.sample_index(lg, gumbel=g, backend="reference")
        assert rec.sample_index(lg, gumbel=g, backend="cpu") == int(np.argmax(lg + g))


@requires_native
def test_decoded_candidates_bit_identical(isa):
    for seed, group, index, size, sigma in [(1, 0, 0, 1, 1.0), (2**64 - 1, 2**32 - 1, 2**24 - 1, 1003, 0.01), (77, 5, 99, 100_000, 3.5)]:
        native = rec.candidate(seed, group, index, size, sigma=sigma, backend="cpu")
        reference = rec.candidate(seed, group, index, size, sigma=sigma, backend="reference")
        assert np.array_equal(native.view(np.uint32), reference.view(np.uint32))
        z = dprec.philox.normals(seed, size, substream=index, group=group)
        assert np.array_equal(native, np.float32(sigma) * z)


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_frequencies_match_softmax(backend):
    # Deterministic chi-square test: fixed logits, fixed private rng.
    phi = np.linspace(-1, 1, 40)
    lg = rec.logits(phi, 2024, 0, 3, sigma=1.0, backend=backend)
    probs = np.exp(lg - lg.max())
    probs /= probs.sum()
    rng = np.random.default_rng(7)
    n = 20_000
    counts = np.bincount([rec.sample_index(lg, rng=rng, backend=backend) for _ in range(n)], minlength=lg.size)
    expected = probs * n
    keep = expected >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    expect = np.append(expected[keep], expected[~keep].sum())
    if expect[-1] == 0:
        observed, expect = observed[:-1], expect[:-1]
    assert stats.chisquare(observed, expect).pvalue > 1e-3


@requires_native
def test_mean_decoded_update_approaches_clipped_update():
    # Importance sampling over K = 2**12 candidates: the mean of the decoded candidate
    # over many independent seeds approaches phi (the bias vanishes as K grows).
    d, sigma, bits, n = 8, 1.0, 12, 400
    phi = np.array([0.5, -0.25, 0.125, 0.0, 0.3, -0.4, 0.2, -0.1])
    rng = np.random.default_rng(3)
    total = np.zeros(d)
    for seed in range(n):
        k = rec.encode_group(phi, seed, 0, bits, sigma=sigma, rng=rng, backend="cpu")
        total += rec.candidate(seed, 0, k, d, sigma=sigma, backend="cpu")
    mean = total / n
    # Each decoded coordinate has variance about sigma^2 = 1, so the standard error is 0.05.
    assert np.max(np.abs(mean - phi)) < 5 * sigma / np.sqrt(n)
    # With K = 2 the mean is visibly shrunk towards 0 compared with K = 2**12.
    small = np.zeros(d)
    for seed in range(n):
        k = rec.encode_group(phi, seed, 0, 1, sigma=sigma, rng=rng, backend="cpu")
        small += rec.candidate(seed, 0, k, d, sigma=sigma, backend="cpu")
    assert np.linalg.norm(mean - phi) < np.linalg.norm(small / n - phi)


@requires_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_accumulate_bit_identical_and_correct(isa, dtype):
    d = 20_003
    seeds = [1, 2**64 - 1, 12345, 7]
    indices = [0, 127, 3, 2**24 - 1]
    weights = [0.25, 1.5, -0.5, 2.0]
    sigma = [0.1, 0.2, 0.3, 0.4]
    start = np.linspace(-1, 1, d).astype(dtype)
    native = rec.accumulate(start.copy(), 9, seeds, indices, sigma=sigma, weights=weights, backend="cpu")
    reference = rec.accumulate(start.copy(), 9, seeds, indices, sigma=sigma, weights=weights, backend="reference")
    assert np.array_equal(native, reference)
    expected = start.astype(np.float64)
    for s, k, w, sg in zip(seeds, indices, weights, sigma):
        expected += w * sg * dprec.philox.normals(s, d, substream=k, group=9).astype(np.float64)
    atol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(native, expected, rtol=0, atol=atol * len(seeds) * 10)


@requires_native
def test_accumulate_identical_for_any_thread_count(threads):
    outs = []
    for n in (1, 2, 4):
        threads(n)
        outs.append(rec.accumulate(np.zeros(100_001, np.float32), 0, [1, 2, 3], [4, 5, 6], sigma=0.5, backend="cpu"))
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


def test_gumbel_noise_is_gumbel_and_private():
    g = rec.gumbel_noise(200_000, np.random.default_rng(5))
    assert np.isfinite(g).all()
    assert stats.kstest(g, "gumbel_r").pvalue > 1e-3
    # Without an rng, two calls draw from fresh OS entropy.
    assert not np.array_equal(rec.gumbel_noise(16), rec.gumbel_noise(16))
