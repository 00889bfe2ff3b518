"""The CUDA SecAgg server-side kernels' bodies run on the host (``dprec._gpu_emulation``).

csrc/cuda/modular_bodies.h holds the bodies of the GPU modular sum (one thread per column,
rows inner, grid-stride) and centered lift; csrc/python/bind_emulation_modular.cpp runs them
thread by thread on the launch grid of modular_launch.cu. These tests hold them to the
arithmetic of tests/modular_numpy.py (Python integers and NumPy's wrapping uint64): edge values
(0, 1, M/2 - 1, M/2, M - 1) at bits 1 .. 64, accumulation on and off, input bits above M,
int64 / float64 / float32 lifts, many rows (the unrolled row loop and its tail), a shrunken
grid (the grid-stride loop), aliasing, and the argument checks the binding shares with the
GPU. Nothing here needs a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec._runtime import dispatch as _dispatch
from tests import modular_numpy as ref
from tests.conftest import gpu_emulation


@pytest.fixture(scope="module")
def emu():
    return gpu_emulation()  # skips without the module (wheels)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _emu_sum(emu, xs: np.ndarray, bits: int, start: np.ndarray | None = None, **kw) -> np.ndarray:
    n, m = xs.shape
    out = np.full(m, 0xA5, ref.storage(bits)) if start is None else start.copy()
    emu.mod_sum(np.ascontiguousarray(xs).reshape(-1), n, m, bits, out, start is not None, **kw)
    return out


def _emu_lift(emu, x: np.ndarray, bits: int, scale: float = 1.0, dtype=np.int64, **kw) -> np.ndarray:
    out = np.full(x.size, 7, dtype)
    emu.mod_lift(x.reshape(-1), bits, scale, out, **kw)
    return out


# ---- the reference against itself ------------------------------------------------------------


@pytest.mark.parametrize("bits", ref.BITS)
def test_numpy_reference_agrees_with_python_integers(bits):
    rng = np.random.default_rng(bits)
    xs = ref.random_values(rng, (37, 19), bits, full_width=True)
    start = ref.random_values(rng, 19, bits, full_width=True)
    assert _same_bits(ref.sum_numpy(xs, bits), ref.sum_python(xs, bits))
    assert _same_bits(ref.sum_numpy(xs, bits, start), ref.sum_python(xs, bits, start))
    x = xs.reshape(-1)
    for dtype, scale in [(np.int64, 1.0), (np.float64, 0.37), (np.float32, -3.1e-5), (np.float64, 1.0)]:
        assert _same_bits(ref.lift_numpy(x, bits, scale, dtype), ref.lift_python(x, bits, scale, dtype))


# ---- modular sum ---------------------------------------------------------------------------


@pytest.mark.parametrize("bits", ref.BITS)
def test_sum_edge_values(emu, bits):
    """Every pair of edge values (and a third row) summed: the wrap at M and at 2**32 / 2**64."""
    e = np.array(ref.edge_values(bits), dtype=ref.storage(bits))
    a, b = np.meshgrid(e, e)
    xs = np.stack([a.reshape(-1), b.reshape(-1), np.roll(b.reshape(-1), 1)])
    assert _same_bits(_emu_sum(emu, xs, bits), ref.sum_python(xs, bits))
    assert _same_bits(_emu_sum(emu, xs[:2], bits), ref.sum_python(xs[:2], bits))
    assert _same_bits(_emu_sum(emu, xs[:1], bits), ref.sum_python(xs[:1], bits))  # one client: x mod M


@pytest.mark.parametrize("bits", ref.BITS)
@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 33, 100])
def test_sum_matches_numpy(emu, bits, n):
    """Row counts around the unroll (16 rows in flight per thread) exercise the tail loop."""
    rng = np.random.default_rng(1000 * bits + n)
    xs = ref.random_values(rng, (n, 301), bits)
    assert _same_bits(_emu_sum(emu, xs, bits), ref.sum_numpy(xs, bits))


@pytest.mark.parametrize("bits", ref.BITS)
def test_sum_accumulates(emu, bits):
    """accumulate=True continues from out; False ignores what out held (0xA5 bytes or a start)."""
    rng = np.random.default_rng(bits + 7)
    total = ref.random_values(rng, 257, bits)
    want = total.copy()
    for _ in range(3):  # three batches of clients summed into one vector
        xs = ref.random_values(rng, (21, 257), bits)
        total = _emu_sum(emu, xs, bits, total)
        want = ref.sum_python(xs, bits, want)
        assert _same_bits(total, want)
    xs = ref.random_values(rng, (5, 257), bits)
    fresh = total.copy()
    emu.mod_sum(xs.reshape(-1), 5, 257, bits, fresh, False)
    assert _same_bits(fresh, ref.sum_numpy(xs, bits))


@pytest.mark.parametrize("bits", [1, 16, 32, 33, 63, 64])
def test_sum_ignores_bits_above_m(emu, bits):
    """Inputs and a start holding any value of the storage dtype: the result is still the sum
    of the residues mod M (M divides 2**32 and 2**64, so wrapping adds lose nothing)."""
    rng = np.random.default_rng(bits + 11)
    xs = ref.random_values(rng, (40, 100), bits, full_width=True)
    start = ref.random_values(rng, 100, bits, full_width=True)
    assert _same_bits(_emu_sum(emu, xs, bits), ref.sum_python(xs, bits))
    assert _same_bits(_emu_sum(emu, xs, bits, start), ref.sum_python(xs, bits, start))


@pytest.mark.parametrize("bits", [8, 32, 64])
def test_sum_many_clients(emu, bits):
    """1000 clients (the all-ones worst case wraps M - 1 many times over) and 3000 columns."""
    rng = np.random.default_rng(bits)
    xs = ref.random_values(rng, (1000, 3000), bits)
    assert _same_bits(_emu_sum(emu, xs, bits), ref.sum_numpy(xs, bits))
    top = np.full((1000, 5), (1 << bits) - 1, ref.storage(bits))
    want = (-1000) % (1 << bits)  # 1000 * (M - 1) = -1000 mod M
    assert _emu_sum(emu, top, bits).tolist() == [want] * 5


@pytest.mark.parametrize("max_blocks, m", [(1, 1), (1, 255), (1, 256), (1, 257), (1, 1000), (3, 5000), (2, 513)])
def test_sum_grid_stride_covers_every_column_once(emu, max_blocks, m):
    """A grid smaller than the columns: each thread loops with the grid's stride."""
    rng = np.random.default_rng(m)
    for bits in (13, 40):
        xs = ref.random_values(rng, (19, m), bits)
        start = ref.random_values(rng, m, bits)
        assert _same_bits(_emu_sum(emu, xs, bits, max_blocks=max_blocks), ref.sum_numpy(xs, bits))
        assert _same_bits(_emu_sum(emu, xs, bits, start, max_blocks=max_blocks), ref.sum_numpy(xs, bits, start))


def test_sum_into_a_row_of_xs(emu):
    """out may be one of the rows: a thread reads its whole column before writing it."""
    rng = np.random.default_rng(3)
    xs = ref.random_values(rng, (9, 700), 20)
    want = ref.sum_numpy(xs, 20)
    flat = xs.reshape(-1).copy()
    emu.mod_sum(flat, 9, 700, 20, flat[4 * 700 : 5 * 700], False, max_blocks=2)
    assert _same_bits(flat[4 * 700 : 5 * 700], want)


def test_grid_plan(emu):
    g = emu.mod_grid(1)
    assert g == {"blocks": 1, "threads_per_block": 256, "sum_unroll": 16}
    assert emu.mod_grid(257)["blocks"] == 2
    assert emu.mod_grid(1 << 40)["blocks"] == 1 << 16  # capped: the threads loop
    assert emu.mod_grid(5000, 3)["blocks"] == 3


# ---- centered lift ----------------------------------------------------------------------------


LIFTS = [(np.int64, 1.0), (np.float64, 1.0), (np.float64, 2.0**-20), (np.float64, -0.1), (np.float32, 1.0),
         (np.float32, 1.0 / 3.0), (np.float32, 1e-30), (np.float64, 0.0)]


@pytest.mark.parametrize("bits", ref.BITS)
@pytest.mark.parametrize("dtype, scale", LIFTS)
def test_lift_edge_values(emu, bits, dtype, scale):
    x = np.array(ref.edge_values(bits), dtype=ref.storage(bits))
    got = _emu_lift(emu, x, bits, scale, dtype)
    assert _same_bits(got, ref.lift_python(x, bits, scale, dtype))
    if dtype == np.int64:
        m = 1 << bits
        assert got.min() >= -(m // 2) and got.max() < m // 2
        assert int(got[x.tolist().index(m // 2)]) == -(m // 2)  # M/2 lifts to -M/2
        assert int(got[-1]) == -1  # M - 1 lifts to -1


@pytest.mark.parametrize("bits", ref.BITS)
@pytest.mark.parametrize("dtype, scale", LIFTS)
def test_lift_matches_numpy(emu, bits, dtype, scale):
    """Random values over the whole storage width (bits above M are ignored), rounding of
    int64 -> float64 above 2**53 and of float64 -> float32 included."""
    rng = np.random.default_rng(bits)
    x = ref.random_values(rng, 3001, bits, full_width=True)
    assert _same_bits(_emu_lift(emu, x, bits, scale, dtype), ref.lift_numpy(x, bits, scale, dtype))


@pytest.mark.parametrize("max_blocks, count", [(1, 1), (1, 256), (1, 257), (1, 999), (4, 4097)])
def test_lift_grid_stride_covers_every_element_once(emu, max_blocks, count):
    rng = np.random.default_rng(count)
    x = ref.random_values(rng, count, 64, full_width=True)
    for dtype, scale in [(np.int64, 1.0), (np.float32, 0.5)]:
        got = _emu_lift(emu, x, 64, scale, dtype, max_blocks=max_blocks)
        assert _same_bits(got, ref.lift_numpy(x, 64, scale, dtype))


def test_lift_in_place(emu):
    """uint64 values lifted into their own memory, viewed as int64."""
    rng = np.random.default_rng(5)
    x = ref.random_values(rng, 1000, 50)
    want = ref.lift_numpy(x, 50)
    emu.mod_lift(x, 50, 1.0, x.view(np.int64), max_blocks=1)
    assert _same_bits(x.view(np.int64), want)


def test_sum_then_lift_recovers_signed_sums(emu):
    """The SecAgg round trip: clients' signed integers mod M, summed, lifted, are the signed
    sum whenever it lies in [-M/2, M/2)."""
    rng = np.random.default_rng(8)
    bits = 20
    signed = rng.integers(-400, 400, size=(500, 1000))  # |sum| < 500 * 400 < 2**19
    xs = (signed % (1 << bits)).astype(np.uint32)
    total = _emu_sum(emu, xs, bits)
    assert np.array_equal(_emu_lift(emu, total, bits), signed.sum(axis=0))
    scaled = _emu_lift(emu, total, bits, 0.25, np.float64)
    assert np.array_equal(scaled, signed.sum(axis=0) * 0.25)


# ---- agreement with the host backends (once they implement the operations) -------------------


@pytest.mark.parametrize("backend", [b for b in _dispatch.available_backends() if b != "cuda"])
def test_emulation_matches_host_backends(emu, backend):
    """The GPU bodies against the CPU / reference kernels through the backend protocol,
    bit for bit; skips while a backend still has its stub."""
    from dprec._runtime import arrays as _arrays

    k = _dispatch.kernels(backend)
    rng = np.random.default_rng(21)
    for bits in (1, 31, 32, 33, 64):
        xs = ref.random_values(rng, (37, 513), bits)
        start = ref.random_values(rng, 513, bits)
        out = _arrays.read(start.copy(), "out")
        try:
            k.mod_sum(_arrays.read(xs, "xs"), bits, out, True)
        except NotImplementedError:
            pytest.skip(f"the {backend} backend does not implement mod_sum yet")
        assert _same_bits(out.host, _emu_sum(emu, xs, bits, start)), bits
        x = ref.random_values(rng, 999, bits)
        for dtype, scale in [(np.int64, 1.0), (np.float64, 0.3), (np.float32, 1.0 / 7.0)]:
            o = _arrays.empty(None, (999,), np.dtype(dtype).name)
            k.mod_lift(_arrays.read(x, "x"), bits, scale, o)
            assert _same_bits(o.host, _emu_lift(emu, x, bits, scale, dtype)), (bits, dtype)


# ---- argument checks (shared with the CUDA binding) -------------------------------------------


def test_bad_arguments_are_refused(emu):
    x32, x64 = np.zeros(12, np.uint32), np.zeros(12, np.uint64)
    o32, o64 = np.zeros(4, np.uint32), np.zeros(4, np.uint64)
    for bits in (0, 65, -1):
        with pytest.raises(ValueError, match=f"bits must be in 1 .. 64, got {bits}"):
            emu.mod_sum(x32, 3, 4, bits, o32, False)
        with pytest.raises(ValueError, match="bits must be in 1 .. 64"):
            emu.mod_lift(x32, bits, 1.0, np.zeros(12, np.int64))
    with pytest.raises(TypeError, match="xs must have dtype uint64 for bits = 33"):
        emu.mod_sum(x32, 3, 4, 33, o32, False)
    with pytest.raises(TypeError, match="xs must have dtype uint32 for bits = 32"):
        emu.mod_sum(x64, 3, 4, 32, o64, False)
    with pytest.raises(TypeError, match="out must have dtype uint32 for bits = 8"):
        emu.mod_sum(x32, 3, 4, 8, o64, False)
    with pytest.raises(TypeError, match="xs must be uint32 or uint64"):
        emu.mod_sum(np.zeros(12, np.int64), 3, 4, 8, o32, False)
    with pytest.raises(ValueError, match="xs must have n \\* m = 15 elements, got 12"):
        emu.mod_sum(x32, 3, 5, 8, np.zeros(5, np.uint32), False)
    with pytest.raises(ValueError, match="out must have m = 4 elements, got 3"):
        emu.mod_sum(x32, 3, 4, 8, np.zeros(3, np.uint32), False)
    with pytest.raises(ValueError, match="xs must have at least one row"):
        emu.mod_sum(x32, 0, 4, 8, o32, False)
    with pytest.raises(ValueError, match="out must not be empty"):
        emu.mod_sum(x32, 3, 0, 8, o32, False)
    with pytest.raises(ValueError, match="exceeds 2\\*\\*60"):
        emu.mod_sum(x32, 1 << 31, 1 << 30, 8, o32, False)
    with pytest.raises(ValueError, match="max_blocks must be in"):
        emu.mod_sum(x32, 3, 4, 8, o32, False, max_blocks=0)
    with pytest.raises(ValueError, match="out must be writeable"):
        ro = o32.copy()
        ro.flags.writeable = False
        emu.mod_sum(x32, 3, 4, 8, ro, False)
    with pytest.raises(TypeError, match="out must be int64, float64 or float32"):
        emu.mod_lift(x32, 8, 1.0, np.zeros(12, np.int32))
    with pytest.raises(ValueError, match="scale must be 1 for an int64 out"):
        emu.mod_lift(x32, 8, 2.0, np.zeros(12, np.int64))
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="scale must be finite"):
            emu.mod_lift(x32, 8, bad, np.zeros(12, np.float64))
    with pytest.raises(ValueError, match="out must have the size of x"):
        emu.mod_lift(x32, 8, 1.0, np.zeros(11, np.float64))
    with pytest.raises(ValueError, match="x must not be empty"):
        emu.mod_lift(np.zeros(0, np.uint32), 8, 1.0, np.zeros(0, np.float64))
    with pytest.raises(TypeError, match="x must have dtype uint64 for bits = 40"):
        emu.mod_lift(x32, 40, 1.0, np.zeros(12, np.float64))
