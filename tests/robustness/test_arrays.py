"""Issue 12 (items 2, 5 and part of 6): in-place updates that cannot happen are refused,
sizes and shapes are checked before anything is copied, and an overflowing fwht raises."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dprec import rec
from dprec.transforms.hadamard import RandomizedHadamard, fwht
from dprec.transforms.sketch import CountSketch
from tests.conftest import BACKENDS

_SMALL = 64 << 20  # the checks must not allocate anything near the arrays' sizes


def _peak(fn, exc, match):
    """Peak traced allocation while ``fn()`` raises ``exc`` matching ``match``."""
    tracemalloc.start()
    try:
        with pytest.raises(exc, match=match):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- item 2: inplace=True updates the caller's object or raises ---------------------------


def test_fwht_inplace_list_raises():
    x = [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(TypeError, match=r"(?s)inplace=True.*x.*float32 or float64"):
        fwht(x, inplace=True)
    assert x == [1.0, 2.0, 3.0, 4.0]


def test_fwht_inplace_numpy_float16_raises():
    with pytest.raises(TypeError, match="float32 or float64"):
        fwht(np.ones(8, dtype=np.float16), inplace=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fwht_inplace_torch_half_raises(dtype):
    torch = pytest.importorskip("torch")
    t = torch.arange(8, dtype=getattr(torch, dtype))
    keep = t.clone()
    with pytest.raises(TypeError, match=r"(?s)x.*float32 or float64"):
        fwht(t, inplace=True)
    assert torch.equal(t, keep)
    # out of place still works (computed in float32)
    np.testing.assert_allclose(fwht(t, normalize=False), fwht(np.arange(8.0, dtype=np.float32), normalize=False))


def test_fwht_inplace_torch_requires_grad_raises():
    torch = pytest.importorskip("torch")
    t = torch.arange(8, dtype=torch.float32, requires_grad=True)
    with pytest.raises(ValueError, match=r"(?s)x.*grad.*inplace=False.*detach"):
        fwht(t, inplace=True)
    np.testing.assert_array_equal(t.detach().numpy(), np.arange(8.0))
    # the suggested .detach() works and updates t's storage
    d = t.detach()
    assert fwht(d, normalize=False, inplace=True) is d
    np.testing.assert_allclose(t.detach().numpy(), fwht(np.arange(8.0), normalize=False))


def test_fwht_inplace_torch_bumps_autograd_version():
    torch = pytest.importorskip("torch")
    if not hasattr(torch.autograd.graph, "increment_version"):
        pytest.skip("torch without increment_version")
    w = torch.ones(8, requires_grad=True)
    x = torch.arange(8, dtype=torch.float32)
    y = (w * x).sum()  # saves x for backward
    fwht(x, inplace=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_fwht_inplace_torch_float32_still_updates():
    torch = pytest.importorskip("torch")
    t = torch.arange(8, dtype=torch.float64)
    assert fwht(t, normalize=False, inplace=True) is t
    np.testing.assert_allclose(t.numpy(), fwht(np.arange(8.0), normalize=False))


def test_fwht_inplace_other_array_likes_raise():
    class ArrayLike:
        def __array__(self, dtype=None, copy=None):
            return np.ones(8)

    with pytest.raises(TypeError, match="inplace=True"):
        fwht(ArrayLike(), inplace=True)
    with pytest.raises(TypeError, match="inplace=True"):
        fwht((1.0, 2.0), inplace=True)


def test_count_sketch_encode_out_is_updated_or_refused():
    cs = CountSketch(16, 3, 8, seed=1)
    out = np.zeros(cs.shape, dtype=np.float32)
    assert cs.encode(np.ones(16, dtype=np.float32), out=out) is out
    assert np.abs(out).sum() > 0
    with pytest.raises(TypeError, match="out"):
        cs.encode(np.ones(16), out=out.tolist())
    with pytest.raises(TypeError, match="out"):
        cs.encode(np.ones(16), out=np.zeros(cs.shape, dtype=np.float16))


# --- item 5: sizes and shapes are checked before anything is copied -----------------------


def test_fwht_zero_stride_2_31_is_refused_without_copying():
    x = np.broadcast_to(np.float32(1), (1 << 31,))
    assert _peak(lambda: fwht(x), ValueError, r"too long.*2\*\*30") < _SMALL
    assert _peak(lambda: fwht(x, backend="reference"), ValueError, r"too long") < _SMALL
    # float16 input would be converted to float32 (8 GiB) before the check
    h = np.broadcast_to(np.float16(1), (1 << 31,))
    assert _peak(lambda: fwht(h), ValueError, r"too long") < _SMALL
    assert _peak(lambda: fwht(np.broadcast_to(np.float32(1), (3, 12))), ValueError, "power-of-two") < _SMALL


def test_rec_logits_2_35_raises_value_error_not_memory_error():
    phi = np.broadcast_to(np.float32(1), (1 << 35,))
    assert _peak(lambda: rec.logits(phi, 1, 0, 4, sigma=1.0), ValueError, r"phi\.size.*2\*\*34") < _SMALL


def test_rec_logits_2_35_float16_raises_value_error():
    phi = np.broadcast_to(np.float16(1), (1 << 35,))
    assert _peak(lambda: rec.logits(phi, 1, 0, 4, sigma=1.0), ValueError, r"phi\.size.*2\*\*34") < _SMALL


def test_randomized_hadamard_wrong_shape_is_refused_without_copying():
    rot = RandomizedHadamard(5, seed=1)
    x = np.broadcast_to(np.float32(1), (1 << 31,))
    assert _peak(lambda: rot.forward(x), ValueError, r"last axis of length dim=5") < _SMALL
    assert _peak(lambda: rot.inverse(x), ValueError, r"last axis of length padded_dim=8") < _SMALL
    big = np.broadcast_to(np.float16(1), (1 << 28, 8))  # 2**31 float16: a 8 GiB float32 copy
    assert _peak(lambda: rot.forward(big), ValueError, "dim=5") < _SMALL


def test_count_sketch_wrong_shape_is_refused_without_copying():
    cs = CountSketch(16, 3, 8, seed=1)
    x = np.broadcast_to(np.float32(1), (1 << 31,))
    assert _peak(lambda: cs.encode(x), ValueError, r"x must have shape \(16,\)") < _SMALL
    assert _peak(lambda: cs.decode(x), ValueError, r"table must have shape \(3, 8\)") < _SMALL
    huge = np.broadcast_to(np.float32(1), (1 << 35,))
    assert _peak(lambda: cs.encode(huge), ValueError, r"x\.size.*2\*\*34") < _SMALL


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_half_wrong_size_is_refused_before_conversion(dtype):
    torch = pytest.importorskip("torch")
    # expand() is torch's zero-stride view: converting it to float32 would need 8 GiB
    t = torch.ones(1, dtype=getattr(torch, dtype)).expand(1 << 31)
    with pytest.raises(ValueError, match="too long"):
        fwht(t)
    with pytest.raises(ValueError, match="dim=5"):
        RandomizedHadamard(5, 1).forward(t)
    with pytest.raises(ValueError, match="shape"):
        CountSketch(16, 3, 8, seed=1).encode(t)


# --- item 6 (fwht part): an overflowing transform raises -----------------------------------


def test_fwht_overflow_raises():
    x = np.full(8, 3e38, np.float32)
    with pytest.raises(ValueError, match=r"fwht\(x\) overflows float32"):
        fwht(x, normalize=False)
    with pytest.raises(ValueError, match="overflows"):
        fwht(x, normalize=False, backend="reference")
    with pytest.raises(ValueError, match="overflows"):
        fwht(x)  # 3e38 * 8 / sqrt(8) is beyond float32 too
    # in place: raised, and the caller's array is left as it was
    y = x.copy()
    with pytest.raises(ValueError, match="overflows"):
        fwht(y, normalize=False, inplace=True)
    np.testing.assert_array_equal(y, x)
    # float64 has the range
    np.testing.assert_allclose(fwht(x.astype(np.float64), normalize=False)[0], 8 * 3e38, rtol=1e-6)


def test_fwht_large_but_finite_in_place_is_fine():
    # max|x| * n beyond float32's range, but the result is finite: the slow path writes it back
    x = np.zeros(8, np.float32)
    x[0] = 3e38
    assert fwht(x, normalize=False, inplace=True) is x
    np.testing.assert_array_equal(x, np.full(8, np.float32(3e38)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fwht_beyond_the_bound_but_finite_out_of_place(backend):
    # max|x| above the no-overflow bound: the input and the result are scanned, and a finite
    # result is returned; NaN in such an input is still named
    x = np.zeros(1 << 10, np.float32)
    x[0] = 3e38
    np.testing.assert_array_equal(fwht(x, normalize=False, backend=backend), np.full(1 << 10, np.float32(3e38)))
    x[5] = np.nan
    with pytest.raises(ValueError, match="x contains NaN"):
        fwht(x, backend=backend)


def test_fwht_result_is_64_byte_aligned(rng):
    # NumPy aligns to 16 bytes; the FWHT's own output is aligned for its whole-line kernels
    # from 64 KiB up (below, a plain array)
    for n in (8, 1 << 12, 1 << 13, 1 << 17):
        x = rng.standard_normal((3, n)).astype(np.float32)
        y = fwht(x)
        assert y.shape == x.shape and y.dtype == np.float32 and y.flags.c_contiguous and y.flags.writeable
        if x.nbytes >= 1 << 16:
            assert y.ctypes.data % 64 == 0
        np.testing.assert_allclose(y, fwht(x, backend="reference"), rtol=1e-5, atol=1e-5)


def test_randomized_hadamard_overflow_raises():
    x = np.full(8, 3e38, np.float32)
    rot = RandomizedHadamard(8, seed=3)
    with pytest.raises(ValueError, match=r"rotation of x overflows float32"):
        rot.forward(x)
    with pytest.raises(ValueError, match=r"rotation of y overflows float32"):
        rot.inverse(x)
