"""docs/bad-input.md for the kernel-level API: every bad input gets a clear exception naming it."""

from __future__ import annotations

import numpy as np
import pytest

import dprec
from dprec import rec
from dprec._runtime import native as _native
from tests.conftest import BACKENDS, requires_native

PHI = np.linspace(-1, 1, 33, dtype=np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.complex64])
def test_non_float_dtypes_rejected(backend, dtype):
    with pytest.raises(TypeError, match="phi"):
        rec.logits(PHI.astype(dtype), 1, 0, 2, sigma=1.0, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_converted_to_float32(backend):
    half = PHI.astype(np.float16)
    got = rec.logits(half, 1, 0, 2, sigma=1.0, backend=backend)
    assert np.array_equal(got, rec.logits(half.astype(np.float32), 1, 0, 2, sigma=1.0, backend=backend))


def test_bfloat16_tensor_converted():
    torch = pytest.importorskip("torch")
    t = torch.linspace(-1, 1, 33, dtype=torch.bfloat16)
    got = rec.logits(t, 1, 0, 2, sigma=1.0)
    assert np.array_equal(got, rec.logits(t.float().numpy(), 1, 0, 2, sigma=1.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rejected(backend, bad):
    phi = PHI.copy()
    phi[5] = bad
    with pytest.raises(ValueError, match="phi contains"):
        rec.logits(phi, 1, 0, 2, sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="logits contains"):
        rec.sample_index(np.array([0.0, bad]), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_rejected(backend):
    with pytest.raises(ValueError, match="phi must not be empty"):
        rec.logits(np.zeros(0, np.float32), 1, 0, 2, sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="size"):
        rec.candidate(1, 0, 0, 0, backend=backend)
    with pytest.raises(ValueError, match="seeds"):
        rec.accumulate(np.zeros(4, np.float32), 0, [], [], sigma=1.0, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_too_large_for_counter_layout(backend):
    with pytest.raises(ValueError, match="2\\*\\*34"):
        rec.candidate(1, 0, 0, 2**34 + 1, backend=backend)
    with pytest.raises(ValueError, match="2\\*\\*34"):
        dprec.philox.normals(1, 10, offset=2**34 - 5, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma", [0.0, -1.0, np.nan, np.inf])
def test_sigma_range(backend, sigma):
    with pytest.raises(ValueError, match="sigma"):
        rec.logits(PHI, 1, 0, 2, sigma=sigma, backend=backend)
    with pytest.raises(ValueError, match="sigma"):
        rec.candidate(1, 0, 0, 4, sigma=sigma, backend=backend)
    with pytest.raises(ValueError, match="sigma"):
        rec.accumulate(np.zeros(4, np.float32), 0, [1], [0], sigma=sigma, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", [0, 25, -1])
def test_bits_range(backend, bits):
    with pytest.raises(ValueError, match="bits"):
        rec.logits(PHI, 1, 0, bits, sigma=1.0, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_arguments(backend):
    with pytest.raises(TypeError, match="bits"):
        rec.logits(PHI, 1, 0, 2.0, sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="seed"):
        rec.logits(PHI, -1, 0, 2, sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="seed"):
        rec.candidate(2**64, 0, 0, 4, backend=backend)
    with pytest.raises(ValueError, match="group"):
        rec.candidate(1, 2**32, 0, 4, backend=backend)
    with pytest.raises(ValueError, match="index"):
        rec.candidate(1, 0, 2**24, 4, backend=backend)
    with pytest.raises(ValueError, match=r"indices\[1\]"):
        rec.accumulate(np.zeros(4, np.float32), 0, [1, 2], [0, 2**24], sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match=r"max\(indices\)"):
        rec.accumulate(np.zeros(4, np.float32), 0, np.array([1], np.uint64), np.array([2**24], np.uint32), sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match=r"seeds\[0\]"):
        rec.accumulate(np.zeros(4, np.float32), 0, np.array([-1]), [0], sigma=1.0, backend=backend)
    with pytest.raises(TypeError, match=r"seeds\[0\]"):
        rec.accumulate(np.zeros(4, np.float32), 0, [1.5], [0], sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="indices"):
        rec.accumulate(np.zeros(4, np.float32), 0, [1, 2], [0], sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="domain"):
        dprec.philox.words(1, 4, domain=16, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulate_output_checks(backend):
    with pytest.raises(TypeError, match="out"):
        rec.accumulate(np.zeros(4, np.int32), 0, [1], [0], sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="out"):
        rec.accumulate(np.zeros(8, np.float32)[::2], 0, [1], [0], sigma=1.0, backend=backend)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        rec.accumulate(ro, 0, [1], [0], sigma=1.0, backend=backend)
    with pytest.raises(ValueError, match="weights"):
        rec.accumulate(np.zeros(4, np.float32), 0, [1], [0], sigma=1.0, weights=[np.nan], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_input_is_copied(backend):
    wide = np.linspace(-1, 1, 66, dtype=np.float32)
    strided = wide[::2]
    assert not strided.flags.c_contiguous
    got = rec.logits(strided, 4, 1, 3, sigma=0.5, backend=backend)
    assert np.array_equal(got, rec.logits(np.ascontiguousarray(strided), 4, 1, 3, sigma=0.5, backend=backend))


def test_gumbel_and_rng_arguments():
    lg = np.zeros(4)
    with pytest.raises(ValueError, match="gumbel"):
        rec.sample_index(lg, gumbel=np.zeros(3))
    with pytest.raises(ValueError, match="rng or gumbel"):
        rec.sample_index(lg, gumbel=np.zeros(4), rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng"):
        rec.sample_index(lg, rng=42)


def test_unknown_and_unavailable_backends():
    with pytest.raises(ValueError, match="backend"):
        rec.logits(PHI, 1, 0, 2, sigma=1.0, backend="gpu")
    with pytest.raises(ValueError, match="cuda"):
        rec.logits(PHI, 1, 0, 2, sigma=1.0, backend="cuda")


def test_device_mismatch_is_a_clear_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="device 'meta'"):
        rec.logits(torch.zeros(8, device="meta"), 1, 0, 2, sigma=1.0)

    class FakeGpuArray:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(ValueError, match="GPU array"):
        rec.logits(FakeGpuArray(), 1, 0, 2, sigma=1.0)


@requires_native
def test_native_layer_checks_what_python_cannot():
    core = _native.native()
    with pytest.raises(TypeError, match="out"):
        core.stream_normals(1, 0, 0, 0, 0, 1.0, np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        core.stream_normals(1, 0, 0, 0, 0, 1.0, np.zeros(8, np.float32)[::2])
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        core.stream_normals(1, 0, 0, 0, 0, 1.0, ro)
    with pytest.raises(ValueError, match="2\\*\\*34"):
        core.stream_normals(1, 0, 0, 0, 2**34 - 1, 1.0, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="2\\*\\*24"):
        core.rec_dot_products(PHI, 1, 0, np.zeros(2**24 + 1))
    with pytest.raises(ValueError, match="same length"):
        core.rec_accumulate(np.zeros(4, np.float32), 0, np.zeros(2, np.uint64), np.zeros(1, np.uint32), np.zeros(2))
    with pytest.raises(TypeError):
        core.stream_normals(-1, 0, 0, 0, 0, 1.0, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="isa"):
        dprec.runtime.set_isa("avx9000")
    with pytest.raises(ValueError, match="n must be"):
        dprec.runtime.set_num_threads(-1)


@requires_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, (1 << 14) + 1, 1 << 17, (1 << 18) + 5])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, "max"])
def test_native_finiteness_check_finds_each_position(dtype, n, bad, threads, isa):
    """_core.all_finite (the check behind every public function) against np.isfinite, on
    every ISA: each non-finite value, first, last or inside a later work item, and the
    largest finite value, which must pass."""
    core = _native.native()
    value = np.finfo(dtype).max if bad == "max" else bad
    for t in (1, 2):
        threads(t)
        assert core.all_finite(np.zeros(n, dtype))
        for pos in sorted({0, n // 2, n - 1}):
            x = np.zeros(n, dtype)
            x[pos] = value
            assert core.all_finite(x) == bool(np.isfinite(x).all())


@requires_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, (1 << 14) + 1, 1 << 17, (1 << 18) + 5])
def test_native_abs_at_most_against_numpy(dtype, n, threads):
    """_core.abs_at_most (the public FWHT's one scan for NaN, infinity and overflow) against
    NumPy: each position of a value just above, at and below the limit, of NaN and of
    infinity, both signs, at 1 and 2 threads."""
    core = _native.native()
    limit = dtype(np.finfo(dtype).max / (2 * 1024))
    above, below = np.nextafter(limit, dtype(np.inf)), np.nextafter(limit, dtype(0))
    for t in (1, 2):
        threads(t)
        assert core.abs_at_most(np.zeros(n, dtype), float(limit))
        for value in (above, limit, below, np.nan, np.inf, dtype(0)):
            for sign in (1, -1):
                for pos in sorted({0, n // 2, n - 1}):
                    x = np.zeros(n, dtype)
                    x[pos] = sign * value
                    assert core.abs_at_most(x, float(limit)) == bool(np.all(np.abs(x) <= limit)), (value, sign, pos)
    with pytest.raises(ValueError, match="limit must be positive and finite"):
        core.abs_at_most(np.zeros(4, dtype), float("inf"))
    with pytest.raises(ValueError, match="limit must be positive and finite"):
        core.abs_at_most(np.zeros(4, dtype), 0.0)
    with pytest.raises(TypeError, match="x must have dtype"):
        core.abs_at_most(np.zeros(4, np.int32), 1.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_rejected_in_large_arrays(bad):
    """Large inputs take the native finiteness check: the error still names the argument."""
    x = np.ones(1 << 18, np.float32)
    x[-1] = bad
    with pytest.raises(ValueError, match="x contains"):
        dprec.transforms.hadamard.fwht(x)
    with pytest.raises(ValueError, match="phi contains"):
        rec.logits(x, 1, 0, 2, sigma=1.0)


@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_finiteness_check_without_the_native_module(monkeypatch, bad):
    """With no native module the same check runs in NumPy, with the same message."""
    from dprec._runtime import arrays as _arrays

    monkeypatch.setattr(_native, "_native", None)
    x = np.ones((3, 5), np.float64)
    assert _arrays.float_input(x, "x") is not None
    x[2, 4] = bad
    with pytest.raises(ValueError, match="x contains"):
        _arrays.float_input(x, "x")
