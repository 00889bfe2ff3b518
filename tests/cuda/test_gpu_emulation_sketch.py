"""The CUDA count-sketch kernels' per-thread bodies run on the host (``dprec._gpu_emulation``).

csrc/cuda/sketch_bodies.h holds the bodies of the GPU encode (pairs, fold) and decode
(mean, median) kernels; csrc/python/bind_emulation_sketch.cpp runs them thread by thread
with the batch plan of sketch_launch.cu, and emulates CUB's stable radix sort with
std::stable_sort on the same keys. These tests hold that to the CPU kernels bit for bit,
including the batching (many small batches via ``max_pairs``), both folds (one thread per
run, and one warp per cell for long runs, forced either way via ``cell_fold_min_run``), the
degenerate shapes (a handful of columns, tens of rows, long rows), accumulation into an
existing table, mixed input / table dtypes and signed zeros in the median.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dprec._runtime import native as _native
from tests.conftest import gpu_emulation, requires_native

pytestmark = requires_native

MAX_STREAM = 1 << 34


@pytest.fixture(scope="module")
def core():
    return _native.native()


@pytest.fixture(scope="module")
def emu():
    return gpu_emulation()  # skips without the module (wheels)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _cpu_encode(core, x, seed, group, rows, cols, scale, table):
    t = table.copy()
    core.count_sketch_encode(x.astype(table.dtype), seed, group, rows, cols, scale, t.reshape(-1))
    return t


def _emu_encode(emu, x, seed, group, rows, cols, scale, table, max_pairs=None, cell_fold_min_run=None):
    t = table.copy()
    kwargs = {}
    if max_pairs is not None:
        kwargs["max_pairs"] = max_pairs
    if cell_fold_min_run is not None:
        kwargs["cell_fold_min_run"] = cell_fold_min_run
    emu.count_sketch_encode(x, seed, group, rows, cols, scale, t.reshape(-1), **kwargs)
    return t


DIMS = [1, 2, 3, 4, 5, 7, 8, 13, 64, 99, 1000, 4097]
ROWS = list(range(1, 17)) + [33, 100]
COLS = [1, 2, 3, 7, 64, 100, 1000, 65537]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encode_matches_cpu_bit_for_bit(core, emu, dtype):
    rng = np.random.default_rng(11)
    for dim, rows, cols in itertools.product(DIMS, ROWS, COLS):
        if rows * dim > 200_000 or rows * cols > 2_000_000:
            continue
        seed = int(rng.integers(0, 1 << 64, dtype=np.uint64))
        group = int(rng.integers(0, 1 << 32))
        x = (rng.standard_normal(dim) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
        for scale in (1.0 / rows, 1.0):  # normalize on / off
            zero = np.zeros((rows, cols), dtype)
            want = _cpu_encode(core, x, seed, group, rows, cols, scale, zero)
            got = _emu_encode(emu, x, seed, group, rows, cols, scale, zero)
            assert _same_bits(got, want), (dim, rows, cols, scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encode_accumulates_like_the_cpu(core, emu, dtype):
    """out= adds into the table: each cell continues from its value, in the CPU's order."""
    rng = np.random.default_rng(12)
    for dim, rows, cols in [(1000, 5, 64), (4099, 3, 7), (17, 16, 1), (333, 2, 1000)]:
        table = rng.standard_normal((rows, cols)).astype(dtype)
        want, got = table.copy(), table.copy()
        for client in range(3):  # three clients summed into one table
            x = rng.standard_normal(dim).astype(dtype)
            want = _cpu_encode(core, x, 9, client, rows, cols, 1.0 / rows, want)
            got = _emu_encode(emu, x, 9, client, rows, cols, 1.0 / rows, got)
            assert _same_bits(got, want)


@pytest.mark.parametrize("max_pairs", [1, 4, 5, 12, 64, 100, 1000, 4096])
def test_encode_batching_keeps_the_order(core, emu, max_pairs):
    """Tiny batches: many element chunks and row batches, still the CPU's bits."""
    rng = np.random.default_rng(13)
    for dim, rows, cols, dtype in [(1001, 7, 33, np.float32), (256, 16, 5, np.float64), (37, 3, 1, np.float32)]:
        x = rng.standard_normal(dim).astype(dtype)
        table = rng.standard_normal((rows, cols)).astype(dtype)
        want = _cpu_encode(core, x, 5, 1, rows, cols, 0.25, table)
        got = _emu_encode(emu, x, 5, 1, rows, cols, 0.25, table, max_pairs)
        assert _same_bits(got, want), (dim, rows, cols, max_pairs)


def test_encode_plan_bounds_the_scratch(emu):
    default = emu.count_sketch_encode_plan(1, 1, 1)["max_pairs"]
    assert default == 4  # one Philox block: the smallest chunk
    for dim, rows, cols in [
        (1 << 24, 15, 1 << 16),
        (1 << 20, 15, 1 << 16),
        (1 << 34, 1 << 16, 1 << 18),
        (100, 4, (1 << 32) - 1),
        (5, 1 << 16, 3),
        (1 << 23, 3, (1 << 32) - 1),
        ((1 << 23) + 5, 40, 1),
        (1 << 24, 100, 64),
        (100, 7, (1 << 31) + 1),  # one row per batch: 33 key bits otherwise
        (1 << 20, 1 << 14, 1 << 20),
    ]:
        p = emu.count_sketch_encode_plan(dim, rows, cols)
        bucket_bits = (cols - 1).bit_length()
        assert p["chunk"] % 4 == 0 and p["chunk"] >= min(dim, 4)
        assert p["chunk"] <= 1 << 23 and p["max_pairs"] <= 1 << 23  # kSketchMaxPairs
        assert 1 <= p["row_batch"] <= rows
        assert p["row_batch"] << bucket_bits <= 1 << 32  # 32-bit keys: local row, then bucket
        assert p["max_pairs"] == p["chunk"] * p["row_batch"]
        assert p["sort_bits"] == bucket_bits  # the rows are never sorted; cols = 1 not at all
        assert -(-rows // p["row_batch"]) <= 8  # rows * cols <= 2**34: at most 8 row groups
        assert p["max_fold_cells"] == max(1, p["max_pairs"] // 1024)
    # small problems go in one batch: every row and element sorted at once
    p = emu.count_sketch_encode_plan(1000, 5, 64)
    assert p["chunk"] == 1000 and p["row_batch"] == 5 and p["batches"] == 1


@pytest.mark.parametrize(
    "dim, rows, cols",
    [
        ((1 << 23) + 5, 40, 1000),  # was 80 sorts: a full and an 8-element one per row
        ((1 << 23) + 5, 40, 1),
        ((1 << 22) + 1, 15, 1 << 16),  # was 15: one row of 2**22 + 4 per sort
        (1 << 24, 100, 1 << 16),
        (1 << 20, 100, 1 << 16),  # was 19 sorted bits (8 rows of 2**16 buckets)
        (1 << 24, 3, 3),
    ],
)
def test_encode_plan_degenerate_shapes_take_few_sorts(emu, dim, rows, cols):
    """Every row goes into each batch and chunks are balanced: the number of sorts is within
    one of rows * dim / 2**23, whatever the row length, and the rows add no radix bits."""
    p = emu.count_sketch_encode_plan(dim, rows, cols)
    assert p["row_batch"] == rows
    assert p["batches"] <= -(-rows * dim // (1 << 23)) + 1
    assert p["sort_bits"] == (cols - 1).bit_length()


@pytest.mark.parametrize(
    "dim, rows, cols, cell_fold",
    [
        (1 << 24, 1, 1, True),
        (1 << 24, 40, 3, True),
        (1 << 24, 100, 64, True),
        (1 << 24, 1, 1 << 13, True),  # runs of 1024: the threshold
        (1 << 24, 1, (1 << 13) + 1, False),
        (1 << 24, 15, 1 << 16, False),
        (1000, 5, 1, False),  # short rows: short runs, whatever cols
    ],
)
def test_encode_plan_folds_long_runs_by_cells(emu, dim, rows, cols, cell_fold):
    assert emu.count_sketch_encode_plan(dim, rows, cols)["cell_fold"] is cell_fold


DEGENERATE = [  # (dim, rows, cols): a handful of columns, tens of rows, long rows
    ((1 << 20) + 3, 1, 1),
    (1 << 20, 2, 2),
    ((1 << 20) + 1, 1, 3),
    (1 << 20, 1, 64),
    ((1 << 16) + 1, 40, 1),
    ((1 << 16) + 3, 40, 3),
    ((1 << 14) + 2, 40, 64),
    (99_999, 17, 2),
    (12_345, 33, 3),
]


@pytest.mark.parametrize("dim, rows, cols", DEGENERATE)
@pytest.mark.parametrize(
    "x_dtype, t_dtype", [(np.float32, np.float32), (np.float64, np.float64), (np.float64, np.float32)]
)
def test_encode_degenerate_shapes_match_cpu(core, emu, dim, rows, cols, x_dtype, t_dtype):
    """Few columns: long runs, folded one warp per cell, in one batch (the default cap) and
    in many (a cap of about dim / 5 pairs, so chunks of a few rows' worth), into a zero
    table and accumulated into a random one (out=); all bit for bit with the CPU."""
    from dprec.transforms.sketch import CountSketch

    rng = np.random.default_rng(dim + rows + cols)
    cs = CountSketch(dim, rows, cols, seed=int(rng.integers(0, 1 << 63)), group=rows)
    x = (rng.standard_normal(dim) * 100.0).astype(x_dtype)
    start = rng.standard_normal(cs.shape).astype(t_dtype)
    want_zero = cs.encode(x, out=np.zeros(cs.shape, t_dtype), backend="cpu")
    want_acc = cs.encode(x, out=start.copy(), backend="cpu")
    small_cap = max(4, rows * dim // 5)
    assert emu.count_sketch_encode_plan(dim, rows, cols, small_cap)["batches"] >= 5
    for max_pairs in (None, small_cap):
        zero = np.zeros(cs.shape, t_dtype)
        got_zero = _emu_encode(emu, x, cs.seed, cs.group, rows, cols, cs.scale, zero, max_pairs)
        got_acc = _emu_encode(emu, x, cs.seed, cs.group, rows, cols, cs.scale, start, max_pairs)
        assert _same_bits(got_zero, want_zero), max_pairs
        assert _same_bits(got_acc, want_acc), max_pairs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encode_both_folds_match_cpu(core, emu, dtype):
    """The same batches folded one thread per run and one warp per cell (forced through
    cell_fold_min_run): cells without pairs, runs of every length around the 256-pair tile,
    one batch or many."""
    rng = np.random.default_rng(18)
    cases = [(d, 1, 1) for d in (1, 2, 5, 255, 256, 257, 511, 512, 513, 1000)]
    cases += [(13, 7, 1000), (4097, 3, 7), (1001, 16, 33), (777, 2, 2), (3000, 40, 3), (64, 5, 100)]
    for dim, rows, cols in cases:
        x = rng.standard_normal(dim).astype(dtype)
        table = rng.standard_normal((rows, cols)).astype(dtype)
        want = _cpu_encode(core, x, 21, 4, rows, cols, 1.0 / rows, table)
        for max_pairs in (None, 100, 1000):
            for min_run in (1, 3, 1 << 31):
                got = _emu_encode(emu, x, 21, 4, rows, cols, 1.0 / rows, table, max_pairs, min_run)
                assert _same_bits(got, want), (dim, rows, cols, max_pairs, min_run)


def test_encode_mixed_dtypes_convert_first(core, emu):
    """float64 x into a float32 table is x rounded to float32, then sketched (as on the CPU path)."""
    rng = np.random.default_rng(14)
    x64 = rng.standard_normal(777)
    x32 = rng.standard_normal(777).astype(np.float32)
    for x, dtype in [(x64, np.float32), (x32, np.float64)]:
        table = rng.standard_normal((4, 50)).astype(dtype)
        want = _cpu_encode(core, x, 3, 0, 4, 50, 0.25, table)
        got = _emu_encode(emu, x, 3, 0, 4, 50, 0.25, table)
        assert _same_bits(got, want)


def test_encode_top_of_the_group_and_seed_range(core, emu):
    x = np.linspace(-1, 1, 4103).astype(np.float32)
    for seed, group in [(0, 0), ((1 << 64) - 1, (1 << 32) - 1), (0x5EED, 12345)]:
        zero = np.zeros((3, 257), np.float32)
        assert _same_bits(
            _emu_encode(emu, x, seed, group, 3, 257, 1.0, zero), _cpu_encode(core, x, seed, group, 3, 257, 1.0, zero)
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("median", [False, True])
def test_decode_matches_cpu_bit_for_bit(core, emu, dtype, median):
    rng = np.random.default_rng(15)
    rows_list = ROWS if not median else list(range(1, 17)) + [20, 31, 32]
    for rows, cols in itertools.product(rows_list, COLS):
        if rows * cols > 2_000_000:
            continue
        table = rng.standard_normal((rows, cols)).astype(dtype)
        for dim, scale in itertools.product(DIMS, (float(rows), 1.0)):
            if rows * dim > 200_000:
                continue
            seed = int(rng.integers(0, 1 << 64, dtype=np.uint64))
            want = np.empty(dim, dtype)
            got = np.full(dim, np.nan, dtype)
            core.count_sketch_decode(table.reshape(-1), seed, 2, rows, cols, median, scale, want)
            emu.count_sketch_decode(table.reshape(-1), seed, 2, rows, cols, median, scale, got)
            assert _same_bits(got, want), (dim, rows, cols, median, scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_median_keeps_signed_zeros_like_the_cpu(core, emu, dtype):
    """Sparse tables: empty cells read with sign -1 are -0.0. The GPU repeats the CPU's
    sorting network, so even the sign of a zero median agrees (every row count, odd and
    even dims, so the CPU's vector and scalar paths are both compared)."""
    rng = np.random.default_rng(16)
    for rows in range(1, 33):
        for dim in (1, 2, 3, 5, 9, 101, 1001):
            table = np.zeros((rows, 129), dtype)
            table[:, rng.integers(0, 129, size=5)] = rng.standard_normal(5).astype(dtype)
            want = np.empty(dim, dtype)
            got = np.empty(dim, dtype)
            core.count_sketch_decode(table.reshape(-1), 4, 0, rows, 129, True, float(rows), want)
            emu.count_sketch_decode(table.reshape(-1), 4, 0, rows, 129, True, float(rows), got)
            assert _same_bits(got, want), (rows, dim)


def test_median_signed_zero_cases_exist():
    """The previous test is only meaningful if -0.0 medians occur: check that they do."""
    core = _native.native()
    table = np.zeros((3, 16), np.float64)
    out = np.empty(1000, np.float64)
    core.count_sketch_decode(table.reshape(-1), 4, 0, 3, 16, True, 3.0, out)
    assert np.signbit(out).any() and (~np.signbit(out)).any()


def test_round_trip_through_the_public_api(emu):
    """The emulated kernels fed through CountSketch's arguments give CountSketch's results."""
    from dprec.transforms.sketch import CountSketch

    rng = np.random.default_rng(17)
    cs = CountSketch(5000, 5, 300, seed=99, group=3)
    x = rng.standard_normal(5000).astype(np.float32)
    table = np.zeros(cs.shape, np.float32)
    emu.count_sketch_encode(x, cs.seed, cs.group, cs.rows, cs.cols, cs.scale, table.reshape(-1))
    assert _same_bits(table, cs.encode(x, backend="cpu"))
    for method in ("mean", "median"):
        out = np.empty(5000, np.float32)
        emu.count_sketch_decode(
            table.reshape(-1), cs.seed, cs.group, cs.rows, cs.cols, method == "median", float(cs.rows), out
        )
        assert _same_bits(out, cs.decode(table, method, backend="cpu"))


def test_bad_input(emu):
    x = np.ones(8, np.float32)
    t = np.zeros(6, np.float32)
    with pytest.raises(ValueError, match="rows"):
        emu.count_sketch_encode(x, 1, 0, 0, 6, 1.0, t)
    with pytest.raises(ValueError, match="rows"):
        emu.count_sketch_encode(x, 1, 0, (1 << 16) + 1, 1, 1.0, np.zeros((1 << 16) + 1, np.float32))
    with pytest.raises(ValueError, match="cols"):
        emu.count_sketch_encode(x, 1, 0, 1, 0, 1.0, t)
    with pytest.raises(ValueError, match="rows \\* cols"):
        emu.count_sketch_encode(x, 1, 0, 8, (1 << 32) - 1, 1.0, t)
    with pytest.raises(ValueError, match="table"):
        emu.count_sketch_encode(x, 1, 0, 2, 4, 1.0, t)
    with pytest.raises(ValueError, match="empty"):
        emu.count_sketch_encode(np.ones(0, np.float32), 1, 0, 2, 3, 1.0, t)
    with pytest.raises(ValueError, match="scale"):
        emu.count_sketch_encode(x, 1, 0, 2, 3, float("nan"), t)
    with pytest.raises(ValueError, match="max_pairs"):
        emu.count_sketch_encode(x, 1, 0, 2, 3, 1.0, t, 0)
    with pytest.raises(ValueError, match="cell_fold_min_run"):
        emu.count_sketch_encode(x, 1, 0, 2, 3, 1.0, t, 64, 0)
    with pytest.raises(ValueError, match="cell_fold_min_run"):
        emu.count_sketch_encode_plan(8, 2, 3, 64, (1 << 31) + 1)
    with pytest.raises(TypeError, match="table"):
        emu.count_sketch_encode(x, 1, 0, 2, 3, 1.0, np.zeros(6, np.int32))
    with pytest.raises(TypeError, match="x"):
        emu.count_sketch_encode(np.ones(8, np.int64), 1, 0, 2, 3, 1.0, t)
    with pytest.raises(ValueError, match="rows must be at most 32"):
        emu.count_sketch_decode(np.zeros(33, np.float32), 1, 0, 33, 1, True, 1.0, np.empty(4, np.float32))
    with pytest.raises(TypeError, match="same dtype"):
        emu.count_sketch_decode(t, 1, 0, 2, 3, False, 1.0, np.empty(4, np.float64))
    with pytest.raises(ValueError, match="median_scale"):
        emu.count_sketch_decode(t, 1, 0, 2, 3, True, float("inf"), np.empty(4, np.float32))
