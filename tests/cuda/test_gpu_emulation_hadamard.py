"""The GPU FWHT kernel (csrc/cuda/hadamard_bodies.h) run on the host by
``dprec._gpu_emulation``, held bit for bit to the CPU backend.

The emulation runs the kernel's schedule (tile pass, strided passes), its blocks and, per
block, each phase (load with signs and the first stages, shared-memory rounds, store with
the last stages) for all threads in turn, as the barriers order them on the GPU. The plan
depends on the largest buffer the device allows (``max_buf_log2``: 128 KiB with the
opt-in of sm_80/sm_90, 32 KiB as the fallback of older GPUs), so the tests run both. So these tests check the GPU's indexing, the partial last
block of short-row batches, the strided passes' geometry, the fused copy, padding, signs,
scaling and truncation, without a GPU; tests/cuda/test_cuda_hadamard.py compares a real device
with the CPU in the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import hadamard as scipy_hadamard

from dprec._runtime import native as _native
from dprec.transforms.hadamard import RandomizedHadamard
from tests.conftest import gpu_emulation, requires_native

pytestmark = requires_native


@pytest.fixture(scope="module")
def core():
    return _native.native()


@pytest.fixture(scope="module")
def emu():
    return gpu_emulation()  # skips without the module (wheels)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _cpu_fwht(core, x: np.ndarray, n: int, normalize: bool) -> np.ndarray:
    y = x.copy()
    core.fwht(y.reshape(-1), n, normalize)
    return y


def _data(rng, rows: int, n: int, dtype) -> np.ndarray:
    return rng.standard_normal(rows * n).astype(dtype)


# The buffer limits of the plans (log2 of elements): the largest (opt-in shared memory,
# sm_80/sm_90), the middle one (~100 KiB opt-in, sm_86/sm_89) and the 32 KiB fallback.
_BUF = {np.float32: (15, 14, 13), np.float64: (14, 13, 12)}
_OPT_IN, _FALLBACK = 0, 2


def _emu_fwht(emu, x: np.ndarray, n: int, normalize: bool, inplace: bool, buf: int = -1) -> np.ndarray:
    if inplace:
        y = x.copy()
        emu.fwht(y, y, n, normalize, buf)
        return y
    out = np.full_like(x, np.nan)
    src = x.copy()
    emu.fwht(src, out, n, normalize, buf)
    assert np.array_equal(_bits(src), _bits(x)), "out-of-place must not touch the input"
    return out


@pytest.mark.parametrize("which_buf", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log2n", range(18))
def test_fwht_bit_identical_to_cpu(core, emu, dtype, log2n, which_buf):
    buf = _BUF[dtype][which_buf]
    rng = np.random.default_rng(1000 + log2n)
    n = 1 << log2n
    # Short rows: several per block, with a partial last block; long rows: several blocks.
    rows = 7 if n <= 1 << 13 else 2
    x = _data(rng, rows, n, dtype)
    for normalize in (True, False):
        want = _cpu_fwht(core, x, n, normalize)
        for inplace in (False, True):
            got = _emu_fwht(emu, x, n, normalize, inplace, buf)
            assert np.array_equal(_bits(got), _bits(want)), (n, normalize, inplace, buf)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log2n", [0, 1, 2, 3, 13, 16])
def test_fwht_unaligned_and_partial_blocks(core, emu, dtype, log2n):
    # A source and destination 4 bytes (float32) / 8 bytes (float64) off 16-byte alignment
    # take the scalar path of the load and store phases instead of the vector one.
    rng = np.random.default_rng(log2n)
    n = 1 << log2n
    rows = 5
    x = _data(rng, rows, n, dtype)
    want = _cpu_fwht(core, x, n, True)
    src_store = np.zeros(rows * n + 1, dtype)
    out_store = np.full(rows * n + 1, np.nan, dtype)
    src, out = src_store[1:], out_store[1:]
    assert src.ctypes.data % 16 != 0 and out.ctypes.data % 16 != 0
    src[:] = x
    for buf in _BUF[dtype]:
        emu.fwht(src, out, n, True, buf)
        assert np.array_equal(_bits(out), _bits(want)), buf


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 31, 64, 1000])
def test_fwht_batches_of_short_rows(core, emu, rows):
    rng = np.random.default_rng(rows)
    for n in (1, 2, 4, 8, 16, 32, 1024, 1 << 14):
        if rows * n > 1 << 20:
            continue
        for dtype in (np.float32, np.float64):
            x = _data(rng, rows, n, dtype)
            want = _bits(_cpu_fwht(core, x, n, True))
            for buf in (_BUF[dtype][_OPT_IN], _BUF[dtype][_FALLBACK]):
                assert np.array_equal(_bits(_emu_fwht(emu, x, n, True, False, buf)), want), (n, buf)


@pytest.mark.parametrize(
    ("dtype", "log2n", "rows", "which_buf"),
    [
        # opt-in buffers (float32 up to 2^15, float64 up to 2^14)
        (np.float32, 18, 1, _OPT_IN),  # 13 + 5 (256-byte column runs)
        (np.float32, 20, 1, _OPT_IN),  # 13 + 7
        (np.float32, 22, 1, _OPT_IN),  # 13 + 9 (64-byte runs)
        (np.float32, 23, 1, _OPT_IN),  # 14 + 9 (tile and strided buffers differ)
        (np.float32, 24, 1, _OPT_IN),  # 14 + 10
        (np.float32, 25, 1, _OPT_IN),  # 15 + 10 in 2^14
        (np.float32, 26, 1, _OPT_IN),  # 15 + 11: the largest n of the performance targets in two passes
        (np.float32, 27, 1, _OPT_IN),  # 15 + 12 (32-byte runs): the most two passes reach
        (np.float64, 21, 1, _OPT_IN),  # 12 + 9
        (np.float64, 22, 1, _OPT_IN),  # 13 + 9
        (np.float64, 24, 1, _OPT_IN),  # 14 + 10 in 2^13
        (np.float64, 25, 1, _OPT_IN),  # 14 + 11
        (np.float64, 26, 1, _OPT_IN),  # 14 + 12 (32-byte runs)
        (np.float32, 15, 9, _OPT_IN),  # a batch of rows of one whole 128 KiB block
        (np.float32, 16, 5, _OPT_IN),  # 13 + 3: all strided stages in the store phase
        (np.float64, 18, 3, _OPT_IN),
        # the 32 KiB fallback
        (np.float32, 14, 3, _FALLBACK),  # 13 + 1
        (np.float32, 20, 1, _FALLBACK),  # 13 + 7
        (np.float32, 23, 1, _FALLBACK),  # 13 + 10 (32-byte runs)
        (np.float32, 24, 1, _FALLBACK),  # three passes: 13 + 6 + 5
        (np.float64, 22, 1, _FALLBACK),  # 12 + 10
        (np.float64, 23, 1, _FALLBACK),  # three passes
        # the middle limit (sm_86/sm_89)
        (np.float32, 25, 1, 1),  # 14 + 11
        (np.float32, 25, 1, 2),  # 13 + 6 + 6 (fallback)
        (np.float64, 24, 1, 1),  # 13 + 11
    ],
)
def test_fwht_long_rows_bit_identical_to_cpu(core, emu, dtype, log2n, rows, which_buf):
    rng = np.random.default_rng(log2n)
    n = 1 << log2n
    x = _data(rng, rows, n, dtype)
    normalize = log2n % 2 == 1  # the inexact scale for odd log2(n)
    want = _cpu_fwht(core, x, n, normalize)
    del x  # (2^27 float32 is 512 MiB an array)
    got = _data(np.random.default_rng(log2n), rows, n, dtype)
    emu.fwht(got, got, n, normalize, _BUF[dtype][which_buf])
    assert np.array_equal(_bits(got), _bits(want))


def _min_passes(log2n: int, buf: int, min_cols: int) -> int:
    if log2n <= buf:
        return 1
    return 1 + -(-(log2n - buf) // (buf - min_cols))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_plans(emu, dtype):
    np_dtype = np.float32 if dtype == "float32" else np.float64
    size = np.dtype(np_dtype).itemsize
    min_cols = 3 if dtype == "float32" else 2  # 32-byte column runs at least
    per_thread = 32 if dtype == "float32" else 16
    for buf in _BUF[np_dtype]:
        for log2n in range(31):
            for rows in (1, 3, 1 << 10):
                plan = emu.fwht_plan(1 << log2n, rows, dtype, buf)
                assert len(plan) == _min_passes(log2n, buf, min_cols), (log2n, buf)
                assert sum(q["m"] for q in plan) == log2n
                h0 = 1
                for k, q in enumerate(plan):
                    p = q["buf_log2"]
                    assert _BUF[np_dtype][_FALLBACK] <= p <= buf
                    assert q["threads"] == (1 << p) // per_thread <= 1024
                    assert q["smem_bytes"] == ((1 << p) + (1 << (p - 5))) * size
                    assert q["h0"] == h0
                    h0 <<= q["m"]
                    if k == 0:
                        assert q["lo"] == 0  # the tile pass
                    else:
                        assert q["lo"] + q["m"] == p and q["lo"] >= min_cols
                    # every stage in exactly one of load, rounds and store
                    s = per_thread.bit_length() - 1
                    middle = q["m"] - q["load_stages"] - q["store_stages"]
                    assert middle >= 0 and q["rounds"] == -(-middle // s)
                    assert q["load_stages"] <= 2 and q["store_stages"] <= s - 2
                    assert q["blocks"] == -(-rows * (1 << log2n) // (1 << p))
    # The target sizes with the opt-in: two passes up to 2^27 (float32), the 2^26 one with
    # a 128 KiB tile of 15 stages then 11 stages over 64-byte column runs.
    if dtype == "float32":
        shape = [(q["buf_log2"], q["lo"], q["m"]) for q in emu.fwht_plan(1 << 26, 1, dtype, 15)]
        assert shape == [(15, 0, 15), (15, 4, 11)]
        assert [q["rounds"] for q in emu.fwht_plan(1 << 26, 1, dtype, 15)] == [2, 2]
        for log2n in range(20, 28):
            assert len(emu.fwht_plan(1 << log2n, 1, dtype, 15)) == 2
        assert len(emu.fwht_plan(1 << 24, 1, dtype, 13)) == 3  # the fallback


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


@pytest.mark.parametrize("which_buf", [_OPT_IN, _FALLBACK])
@pytest.mark.parametrize("dim", _DIMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotation_bit_identical_to_cpu(emu, dim, dtype, which_buf):
    buf = _BUF[dtype][which_buf]
    rng = np.random.default_rng(dim)
    for repeats, rows in ((1, 1), (2, 3), (3, 2)):
        seed = int(rng.integers(0, 2**64, dtype=np.uint64))
        group = int(rng.integers(0, 2**32))
        rot = RandomizedHadamard(dim, seed, repeats=repeats, group=group)
        n = rot.padded_dim
        x = rng.standard_normal((rows, dim)).astype(dtype)
        want = rot.forward(x, backend="cpu")
        got = np.full(rows * n, np.nan, dtype=dtype)
        emu.randomized_hadamard(x.reshape(-1), got, dim, n, seed, group, repeats, False, buf)
        assert np.array_equal(_bits(got), _bits(want).reshape(-1)), ("forward", dim, repeats)

        y = rng.standard_normal((rows, n)).astype(dtype)
        want = rot.inverse(y, backend="cpu")
        got = np.full(rows * dim, np.nan, dtype=dtype)
        emu.randomized_hadamard(y.reshape(-1), got, dim, n, seed, group, repeats, True, buf)
        assert np.array_equal(_bits(got), _bits(want).reshape(-1)), ("inverse", dim, repeats)


@pytest.mark.parametrize(
    ("dim", "dtype", "repeats", "which_buf"),
    [
        ((1 << 20) + 1, np.float32, 2, _OPT_IN),  # n = 2^21: 13 + 8
        ((1 << 20) + 1, np.float32, 3, _FALLBACK),
        ((1 << 22) - 5, np.float64, 2, _OPT_IN),  # n = 2^22: 13 + 9 (tile and strided buffers differ)
        ((1 << 22) - 5, np.float64, 1, _FALLBACK),
        ((1 << 24) - 3, np.float32, 2, _OPT_IN),  # n = 2^24: 14 + 10
        ((1 << 24) - 3, np.float32, 1, _FALLBACK),  # three passes, the work buffer
        ((1 << 25) + 7, np.float32, 1, _OPT_IN),  # n = 2^26: 15 + 11
    ],
)
def test_rotation_with_strided_passes(emu, dim, dtype, repeats, which_buf):
    buf = _BUF[dtype][which_buf]
    rng = np.random.default_rng(5)
    rot = RandomizedHadamard(dim, 77, repeats=repeats, group=3)
    n = rot.padded_dim
    x = rng.standard_normal(dim).astype(dtype)
    fwd = np.empty(n, dtype=dtype)
    emu.randomized_hadamard(x, fwd, dim, n, 77, 3, repeats, False, buf)
    assert np.array_equal(_bits(fwd), _bits(rot.forward(x, backend="cpu")))
    back = np.empty(dim, dtype=dtype)
    emu.randomized_hadamard(fwd, back, dim, n, 77, 3, repeats, True, buf)
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
    with pytest.raises(ValueError, match="max_buf_log2"):
        emu.fwht(x, x, 4, True, 16)
    with pytest.raises(ValueError, match="max_buf_log2"):
        emu.fwht(np.zeros(8), np.zeros(8), 4, True, 15)  # float64 stops at 14
    with pytest.raises(ValueError, match="max_buf_log2"):
        emu.randomized_hadamard(x, np.zeros(16, np.float32), 8, 8, 1, 0, 1, False, 12)
    with pytest.raises(ValueError, match="dtype"):
        emu.fwht_plan(8, 1, "float16", -1)
