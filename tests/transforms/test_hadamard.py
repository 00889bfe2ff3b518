"""FWHT and the randomized Hadamard rotation (docs/contract.md, docs/secagg.md): against scipy's Hadamard
matrix, involution, Parseval, batching, dtypes, in-place rules, Philox signs, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import hadamard as scipy_hadamard

import dprec
from dprec.transforms.hadamard import RandomizedHadamard, fwht
from tests.conftest import BACKENDS
from tests.philox_independent import stream


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", range(11))
def test_fwht_equals_scipy_hadamard(backend, k, rng):
    n = 1 << k
    x = rng.standard_normal(n)
    h = scipy_hadamard(n).astype(np.float64)
    y = fwht(x, normalize=False, backend=backend)
    assert y.dtype == np.float64 and y.shape == (n,)
    np.testing.assert_allclose(y, h @ x, rtol=0, atol=1e-12 * n)
    yn = fwht(x, backend=backend)
    np.testing.assert_allclose(yn, h @ x / np.sqrt(n), rtol=0, atol=1e-12 * np.sqrt(n))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 8, 1024, 1 << 16])
def test_fwht_twice_is_identity_and_parseval(backend, n, rng):
    x = rng.standard_normal(n)
    y = fwht(x, backend=backend)
    np.testing.assert_allclose(np.linalg.norm(y), np.linalg.norm(x), rtol=1e-12)
    np.testing.assert_allclose(fwht(y, backend=backend), x, rtol=0, atol=1e-12)
    # unnormalised: H H = n I
    z = fwht(fwht(x, normalize=False, backend=backend), normalize=False, backend=backend)
    np.testing.assert_allclose(z / n, x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fwht_batched_equals_looped(backend, rng):
    x = rng.standard_normal((3, 4, 64)).astype(np.float32)
    y = fwht(x, backend=backend)
    assert y.shape == x.shape and y.dtype == np.float32
    for i in range(3):
        for j in range(4):
            np.testing.assert_array_equal(y[i, j], fwht(x[i, j], backend=backend))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [4, 512, 1 << 15])
def test_fwht_float32_agrees_with_float64(backend, n, rng):
    x = rng.standard_normal(n)
    y64 = fwht(x, backend=backend)
    y32 = fwht(x.astype(np.float32), backend=backend)
    assert y32.dtype == np.float32
    # log2(n) float32 additions per element, each within 2**-24 of the running magnitude
    tol = 4 * np.log2(n) * 2.0**-24 * np.sqrt(n) * np.max(np.abs(x))
    assert np.max(np.abs(y32 - y64)) <= tol


def test_fwht_backends_agree(rng):
    x = rng.standard_normal((2, 1 << 12)).astype(np.float32)
    ref = fwht(x, backend="reference")
    for b in BACKENDS:
        np.testing.assert_allclose(fwht(x, backend=b), ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fwht_half_precision_is_computed_in_float32(backend):
    x = np.arange(8, dtype=np.float16)
    y = fwht(x, normalize=False, backend=backend)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, scipy_hadamard(8) @ np.arange(8.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fwht_inplace_and_out_of_place(backend, rng):
    x = rng.standard_normal((2, 16))
    keep = x.copy()
    y = fwht(x, backend=backend)
    np.testing.assert_array_equal(x, keep)  # out of place leaves x alone
    assert not np.shares_memory(x, y)
    r = fwht(x, inplace=True, backend=backend)
    assert r is x
    np.testing.assert_array_equal(x, y)
    # non-contiguous input is copied out of place
    z = rng.standard_normal((16, 2))
    np.testing.assert_allclose(fwht(z.T, backend=backend), fwht(np.ascontiguousarray(z.T), backend=backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fwht_bad_input(backend):
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(np.ones(12), backend=backend)
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(np.ones((4, 3)), backend=backend)
    with pytest.raises(TypeError, match="integer"):
        fwht(np.ones(8, dtype=np.int32), backend=backend)
    with pytest.raises(ValueError, match="NaN"):
        fwht(np.array([1.0, np.nan]), backend=backend)
    with pytest.raises(ValueError, match="infinite"):
        fwht(np.array([1.0, np.inf]), backend=backend)
    with pytest.raises(ValueError, match="empty"):
        fwht(np.ones(0), backend=backend)
    with pytest.raises(ValueError, match="at least one axis"):
        fwht(np.float64(1.0), backend=backend)
    ro = np.ones(8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        fwht(ro, inplace=True, backend=backend)
    np.testing.assert_allclose(fwht(ro, backend=backend)[0], np.sqrt(8))  # out of place is fine
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        fwht(np.ones((8, 2)).T, inplace=True, backend=backend)
    with pytest.raises(TypeError, match="float32 or float64"):
        fwht(np.ones(8, dtype=np.float16), inplace=True, backend=backend)
    with pytest.raises(ValueError, match="backend"):
        fwht(np.ones(8), backend="gpu")
    with pytest.raises(ValueError, match="cuda"):  # host data (or no usable CUDA backend)
        fwht(np.ones(8), backend="cuda")


def _independent_signs(seed, n, repeat, group=0):
    return np.where(stream(seed, n, repeat, group, 3) < 2**31, 1.0, -1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rotation_signs_follow_the_philox_contract(backend):
    rot = RandomizedHadamard(1000, seed=0x0123456789ABCDEF, repeats=3, group=7)
    for s in range(3):
        np.testing.assert_array_equal(rot.signs(s, backend=backend), _independent_signs(rot.seed, 1024, s, 7))
    # forward of a unit vector e_j, unnormalised: column j of H scaled by the sign of j
    x = np.zeros(1000)
    x[5] = 1.0
    one = RandomizedHadamard(1000, seed=rot.seed, group=7)
    y = one.forward(x, backend=backend) * np.sqrt(1024)
    np.testing.assert_allclose(y, scipy_hadamard(1024)[:, 5] * _independent_signs(rot.seed, 1024, 0, 7)[5], atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dim", [1, 2, 3, 1000, 1024, 4097])
@pytest.mark.parametrize("repeats", [1, 3])
def test_rotation_round_trip_padding_and_norm(backend, dim, repeats, rng):
    rot = RandomizedHadamard(dim, seed=42, repeats=repeats)
    n = 1 << max(dim - 1, 0).bit_length()
    assert rot.padded_dim == n and rot.dim == dim and rot.repeats == repeats
    x = rng.standard_normal((2, dim))
    y = rot.forward(x, backend=backend)
    assert y.shape == (2, n) and y.dtype == np.float64
    # orthonormal: norms preserved to float64 rounding
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-12)
    back = rot.inverse(y, backend=backend)
    assert back.shape == x.shape
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-12)  # float64 round trip
    x32 = x.astype(np.float32)
    back32 = rot.inverse(rot.forward(x32, backend=backend), backend=backend)
    assert back32.dtype == np.float32
    np.testing.assert_allclose(back32, x32, rtol=0, atol=1e-5)  # float32 round trip


def test_rotation_padding_1000_to_1024_and_matches_definition(rng):
    rot = RandomizedHadamard(1000, seed=3, repeats=2)
    assert rot.padded_dim == 1024
    x = rng.standard_normal(1000)
    h = scipy_hadamard(1024) / 32.0
    z = np.concatenate([x, np.zeros(24)])
    for s in range(2):
        z = h @ (_independent_signs(3, 1024, s) * z)
    for b in BACKENDS:
        np.testing.assert_allclose(rot.forward(x, backend=b), z, atol=1e-12)
    # the inverse of a vector outside the image ignores the padding positions' content
    assert rot.inverse(z).shape == (1000,)


def test_rotation_repeats_differ_and_seeds_matter(rng):
    x = rng.standard_normal(64)
    a = RandomizedHadamard(64, 1).forward(x)
    assert not np.allclose(a, RandomizedHadamard(64, 2).forward(x))
    assert not np.allclose(a, RandomizedHadamard(64, 1, repeats=2).forward(x))
    assert not np.allclose(a, RandomizedHadamard(64, 1, group=1).forward(x))
    assert "padded_dim=64" in repr(RandomizedHadamard(64, 1))


def test_rotation_bad_input():
    with pytest.raises(ValueError):
        RandomizedHadamard(0, 1)
    with pytest.raises(ValueError):
        RandomizedHadamard((1 << 30) + 1, 1)
    with pytest.raises(ValueError):
        RandomizedHadamard(8, -1)
    with pytest.raises(ValueError):
        RandomizedHadamard(8, 1 << 64)
    with pytest.raises(ValueError):
        RandomizedHadamard(8, 1, repeats=0)
    with pytest.raises(TypeError):
        RandomizedHadamard(8.0, 1)
    rot = RandomizedHadamard(10, 1)
    with pytest.raises(ValueError, match="length dim=10"):
        rot.forward(np.ones(16))
    with pytest.raises(ValueError, match="padded_dim=16"):
        rot.inverse(np.ones(10))
    with pytest.raises(TypeError):
        rot.forward(np.ones(10, dtype=np.int64))
    with pytest.raises(ValueError, match="NaN"):
        rot.forward(np.full(10, np.nan))
    with pytest.raises(ValueError, match="cuda"):  # host data (or no usable CUDA backend)
        rot.forward(np.ones(10), backend="cuda")


def test_torch_cpu_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    t = torch.arange(8, dtype=torch.float32)
    np.testing.assert_allclose(fwht(t, normalize=False), scipy_hadamard(8) @ np.arange(8.0))
    fwht(t, normalize=False, inplace=True)
    np.testing.assert_allclose(t.numpy(), scipy_hadamard(8) @ np.arange(8.0))
    assert dprec.transforms.hadamard.RandomizedHadamard(5, 1).forward(torch.ones(5)).shape == (8,)
