"""The GPU FWHT kernel (csrc/cuda/hadamard_bodies.h) run on the host by
``_core.gpu_emulation``, held bit for bit to the CPU backend.

The emulation runs the kernel's schedule (tile pass, strided passes), its blocks and, per
block, each phase (signs, load, register rounds, store) for all threads in turn, as the
barriers order them on the GPU. So these tests check the GPU's indexing, the partial last
block of short-row batches, the strided passes' geometry, the fused copy, padding, signs,
scaling and truncation, without a GPU; tests/test_cuda_hadamard.py compares a real device
with the CPU in the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import hadamard as scipy_hadamard

from dprec import _backend
from dprec.hadamard import RandomizedHadamard

from .conftest import requires_native

pytestmark = requires_native


@pytest.fixture(scope="module")
def core():
    return _backend.native()


@pytest.fixture(scope="module")
def emu(core):
    return core.gpu_emulation


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _cpu_fwht(core, x: np.ndarray, n: int, normalize: bool) -> np.ndarray:
    y = x.copy()
    core.fwht(y.reshape(-1), n, normalize)
    return y


def _data(rng, rows: int, n: int, dtype) -> np.ndarray:
    return rng.standard_normal(rows * n).astype(dtype)


def _emu_fwht(emu, x: np.ndarray, n: int, normalize: bool, inplace: bool) -> np.ndarray:
    if inplace:
        y = x.copy()
        emu.fwht(y, y, n, normalize)
        return y
    out = np.full_like(x, np.nan)
    src = x.copy()
    emu.fwht(src, out, n, normalize)
    assert np.array_equal(_bits(src), _bits(x)), "out-of-place must not touch the input"
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log2n", range(17))
def test_fwht_bit_identical_to_cpu(core, emu, dtype, log2n):
    rng = np.random.default_rng(1000 + log2n)
    n = 1 << log2n
    # Short rows: several per block, with a partial last block; long rows: several blocks.
    rows = 7 if n <= 1 << 13 else 2
    x = _data(rng, rows, n, dtype)
    for normalize in (True, False):
        want = _cpu_fwht(core, x, n, normalize)
        for inplace in (False, True):
            got = _emu_fwht(emu, x, n, normalize, inplace)
            assert np.array_equal(_bits(got), _bits(want)), (n, normalize, inplace)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 31, 64, 1000])
def test_fwht_batches_of_short_rows(core, emu, rows):
    rng = np.random.default_rng(rows)
    for n in (1, 2, 4, 8, 16, 32, 1024):
        for dtype in (np.float32, np.float64):
            x = _data(rng, rows, n, dtype)
            assert np.array_equal(_bits(_emu_fwht(emu, x, n, True, False)), _bits(_cpu_fwht(core, x, n, True)))


@pytest.mark.parametrize(
    ("dtype", "log2n", "rows"),
    [
        (np.float32, 20, 1),  # tile + one strided pass of 7 stages
        (np.float32, 23, 1),  # tile + one strided pass of 10 stages (the most per pass)
        (np.float32, 24, 1),  # tile + two strided passes (6 + 5)
        (np.float64, 22, 1),  # tile (12) + one strided pass of 10
        (np.float64, 23, 1),  # tile + two strided passes
        (np.float32, 15, 9),  # a batch of rows longer than one block
        (np.float64, 18, 3),
    ],
)
def test_fwht_long_rows_bit_identical_to_cpu(core, emu, dtype, log2n, rows):
    rng = np.random.default_rng(log2n)
    n = 1 << log2n
    x = _data(rng, rows, n, dtype)
    normalize = log2n % 2 == 1  # the inexact scale for odd log2(n)
    want = _cpu_fwht(core, x, n, normalize)
    assert np.array_equal(_bits(_emu_fwht(emu, x, n, normalize, True)), _bits(want))


def test_fwht_matches_the_matrix(emu):
    rng = np.random.default_rng(3)
    for n in (1, 2, 8, 64):
        x = rng.standard_normal((3, n))
        y = x.reshape(-1).copy()
        emu.fwht(y, y, n, False)
        np.testing.assert_allclose(y.reshape(3, n), x @ scipy_hadamard(n).T, rtol=1e-12, atol=1e-12)


def test_fwht_is_deterministic_and_zero_signs_survive(emu, core):
    # -0.0 inputs: the butterflies must see the same signed zeros as on the CPU.
    x = np.array([-0.0, 0.0, -0.0, -0.0, 0.0, 0.0, -0.0, 0.0] * 4, dtype=np.float32)
    out = np.empty_like(x)
    emu.fwht(x, out, 32, True)
    assert np.array_equal(_bits(out), _bits(_cpu_fwht(core, x, 32, True)))


# ---------------------------------------------------------------------------------------
# Randomized Hadamard
# ---------------------------------------------------------------------------------------

_DIMS = [1, 2, 3, 5, 8, 9, 100, 1000, 1024, 4097, 8193, (1 << 14) + 3, 70000]


@pytest.mark.parametrize("dim", _DIMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotation_bit_identical_to_cpu(emu, dim, dtype):
    rng = np.random.default_rng(dim)
    for repeats, rows in ((1, 1), (2, 3), (3, 2)):
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        group = int(rng.integers(0, 2**32))
        rot = RandomizedHadamard(dim, seed, repeats=repeats, group=group)
        n = rot.padded_dim
        x = rng.standard_normal((rows, dim)).astype(dtype)
        want = rot.forward(x, backend="cpu")
        got = np.full(rows * n, np.nan, dtype=dtype)
        emu.randomized_hadamard(x.reshape(-1), got, dim, n, seed, group, repeats, False)
        assert np.array_equal(_bits(got), _bits(want).reshape(-1)), ("forward", dim, repeats)

        y = rng.standard_normal((rows, n)).astype(dtype)
        want = rot.inverse(y, backend="cpu")
        got = np.full(rows * dim, np.nan, dtype=dtype)
        emu.randomized_hadamard(y.reshape(-1), got, dim, n, seed, group, repeats, True)
        assert np.array_equal(_bits(got), _bits(want).reshape(-1)), ("inverse", dim, repeats)


@pytest.mark.parametrize(("dim", "dtype"), [((1 << 20) + 1, np.float32), ((1 << 22) - 5, np.float64)])
def test_rotation_with_strided_passes(emu, dim, dtype):
    rng = np.random.default_rng(5)
    rot = RandomizedHadamard(dim, 77, repeats=2, group=3)
    n = rot.padded_dim
    x = rng.standard_normal(dim).astype(dtype)
    fwd = np.empty(n, dtype=dtype)
    emu.randomized_hadamard(x, fwd, dim, n, 77, 3, 2, False)
    assert np.array_equal(_bits(fwd), _bits(rot.forward(x, backend="cpu")))
    back = np.empty(dim, dtype=dtype)
    emu.randomized_hadamard(fwd, back, dim, n, 77, 3, 2, True)
    assert np.array_equal(_bits(back), _bits(rot.inverse(fwd, backend="cpu")))
    np.testing.assert_allclose(back, x, atol=1e-4 if dtype == np.float32 else 1e-12)


def test_emulation_checks_its_arguments(emu):
    x = np.zeros(12, np.float32)
    with pytest.raises(ValueError, match="power of two"):
        emu.fwht(x, x, 3, True)
    with pytest.raises(ValueError, match="multiple of 8"):
        emu.fwht(x, x, 8, True)
    with pytest.raises(ValueError, match="size of src"):
        emu.fwht(x, np.zeros(8, np.float32), 4, True)
    with pytest.raises(TypeError, match="out"):
        emu.fwht(x, np.zeros(12, np.float64), 4, True)
    with pytest.raises(ValueError, match="dim"):
        emu.randomized_hadamard(x, np.zeros(32, np.float32), 3, 8, 1, 0, 1, False)
    with pytest.raises(ValueError, match="repeats"):
        emu.randomized_hadamard(x, np.zeros(16, np.float32), 6, 8, 1, 0, 0, False)
    with pytest.raises(ValueError, match="not be the same"):
        y = np.zeros(16, np.float32)
        emu.randomized_hadamard(y, y, 8, 8, 1, 0, 1, False)
