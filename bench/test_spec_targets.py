"""The CPU performance targets as pytest-benchmark groups: ``pytest bench/ --benchmark-only``.

Each group times dprec and its anchors in the same session; ``bench/conftest.py`` prints the
side-by-side table and checks the ratio against the target. The sizes are the targets'
(``--dprec-quick`` shrinks them for a smoke run). Needs ``pip install ".[bench]"``; PyTorch and
FFHT (``pip install --no-build-isolation ffht-unofficial``) anchors are skipped with the reason
when missing, and their targets are then reported as ``n/a``.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from bench_hadamard import aligned_empty  # noqa: E402 - bench/ is on sys.path under pytest
from conftest import Target, add_target, overhead, speedup
from dprec import philox, rec
from dprec._runtime import native as _native
from dprec.bench import _SEED, _SIGMA, _generate_only, _phi, _torch_encode
from dprec.constants import DOMAIN_SKETCH_BUCKET, DOMAIN_SKETCH_SIGN
from dprec.transforms import hadamard
from dprec.transforms.sketch import CountSketch

pytestmark = pytest.mark.skipif(not _native.native_available(), reason="the native CPU module is not built")
CORES = os.cpu_count() or 1


def _torch():
    return pytest.importorskip("torch", reason="PyTorch anchor: torch is not installed")


# ---------------------------------------------------------------------------------------------- DP-REC encode

ENCODE = "DP-REC encode, K=2^7, float32"  # d = 2**20 (2**14 with --dprec-quick)
add_target(Target(ENCODE, ">= 6x PyTorch", speedup("pytorch", "dprec"), minimum=6.0))
add_target(Target(ENCODE, ">= 15x NumPy reference", speedup("numpy reference", "dprec"), minimum=15.0))
add_target(Target(ENCODE, "fused LLR <= 1.25x generate-only", overhead("dprec", "generate only"), maximum=1.25))


def _encode_size(quick: bool) -> tuple[int, int]:
    return (1 << 14, 7) if quick else (1 << 20, 7)


def test_encode_dprec(measure, quick):
    d, bits = _encode_size(quick)
    phi = _phi(d)

    def run() -> int:
        return rec.sample_index(rec.logits(phi, _SEED, 0, bits, sigma=_SIGMA, backend="cpu"), backend="cpu")

    measure(ENCODE, "dprec", run, d << bits, "cand-elem")


def test_encode_generate_only(measure, quick):
    d, bits = _encode_size(quick)
    core = _native.native()
    buf = np.empty(min(d, 1 << 16), np.float32)
    measure(ENCODE, "generate only", lambda: _generate_only(core, d, 1 << bits, buf), d << bits, "cand-elem")


def test_encode_numpy_reference(measure, quick):
    d, _ = _encode_size(quick)
    bits = 3  # the reference is slow: K = 2**3 candidates, compared per candidate-element
    phi = _phi(d)

    def run() -> int:
        lg = rec.logits(phi, _SEED, 0, bits, sigma=_SIGMA, backend="reference")
        return rec.sample_index(lg, backend="reference")

    measure(ENCODE, "numpy reference", run, d << bits, "cand-elem", rounds=3)


def test_encode_pytorch(measure, quick):
    torch = _torch()
    d, bits = _encode_size(quick)
    torch.set_num_threads(CORES)
    phi_t = torch.from_numpy(_phi(d))
    gen = torch.Generator().manual_seed(1)
    measure(ENCODE, "pytorch", lambda: _torch_encode(torch, phi_t, 1 << bits, gen), d << bits, "cand-elem")


# ---------------------------------------------------------------------------------------------- DP-REC decode

DECODE = "DP-REC decode one candidate"  # d = 2**20 (2**14 with --dprec-quick)
add_target(Target(DECODE, "<= 1.5x generating d normals", overhead("decode", "d normals"), maximum=1.5))


def test_decode(measure, quick):
    d = 1 << 14 if quick else 1 << 20
    measure(DECODE, "decode", lambda: rec.candidate(_SEED, 3, 77, d, sigma=_SIGMA, backend="cpu"), d, "elem")


def test_decode_anchor_normals(measure, quick):
    d = 1 << 14 if quick else 1 << 20
    core = _native.native()
    buf = np.empty(d, np.float32)
    measure(DECODE, "d normals", lambda: core.stream_normals(_SEED, 77, 3, 0, 0, 1.0, buf), d, "elem")


# ---------------------------------------------------------------------------------------------- FWHT

FWHT_SIZES = [10, 14, 18, 21, 22, 24]


def _fwht_group(log2_n: int) -> str:
    group = f"FWHT float32, n=2^{log2_n}"
    add_target(Target(group, ">= 1.0x FFHT, one thread", speedup("ffht", "dprec kernel, 1 thread"), minimum=1.0))
    if log2_n >= 18 and CORES >= 2:
        add_target(Target(group, f">= 1.6x FFHT with {CORES} threads",
                          speedup("ffht", f"dprec kernel, {CORES} threads"), minimum=1.6))
    return group


def _fwht_buffer(log2_n: int, quick: bool) -> np.ndarray:
    if quick and log2_n > 14:
        pytest.skip("--dprec-quick: n <= 2**14 only")
    return aligned_empty(1 << log2_n)  # 64-byte aligned, as FFHT's own benchmarks use


@pytest.mark.parametrize("log2_n", FWHT_SIZES)
@pytest.mark.parametrize("nthreads", sorted({1, CORES}))
def test_fwht_dprec_kernel(measure, threads, quick, log2_n, nthreads):
    """The native kernel (``dprec._core.fwht``, in place, unnormalised, as FFHT): what the targets compare. Repeated
    in-place calls let the values grow (to inf at small n); that costs nothing on x86 (no denormals), as for FFHT."""
    buf = _fwht_buffer(log2_n, quick)
    buf[...] = np.random.default_rng(log2_n).standard_normal(buf.size)
    threads(nthreads)
    core = _native.native()
    label = f"dprec kernel, {nthreads} thread{'s' if nthreads > 1 else ''}"
    measure(_fwht_group(log2_n), label, lambda: core.fwht(buf, buf.size, False), buf.size, "elem", rounds=11)


@pytest.mark.parametrize("log2_n", FWHT_SIZES)
def test_fwht_dprec_public(measure, quick, log2_n):
    """``dprec.transforms.hadamard.fwht(..., inplace=True)`` on every core: the kernel plus the public API's checks. Normalised
    (orthonormal): repeated unnormalised transforms of one buffer overflow float32, which the public API refuses."""
    buf = _fwht_buffer(log2_n, quick)
    buf[...] = np.random.default_rng(log2_n).standard_normal(buf.size)
    measure(_fwht_group(log2_n), "hadamard.fwht (public API, normalised)",
            lambda: hadamard.fwht(buf, inplace=True, normalize=True), buf.size, "elem", rounds=11)


@pytest.mark.parametrize("log2_n", FWHT_SIZES)
def test_fwht_ffht(measure, quick, log2_n):
    ffht = pytest.importorskip("ffht", reason="FFHT anchor: pip install --no-build-isolation ffht-unofficial")
    buf = _fwht_buffer(log2_n, quick)
    buf[...] = np.random.default_rng(log2_n).standard_normal(buf.size)
    measure(_fwht_group(log2_n), "ffht", lambda: ffht.fht_(buf), buf.size, "elem", rounds=11)


# ---------------------------------------------------------------------------------------------- count-sketch

SKETCH_ROWS = [5, 15]


def _sketch_setup(rows: int, quick: bool) -> tuple[CountSketch, np.ndarray, str]:
    d = 1 << 14 if quick else 1 << 20
    cols = 1 << 16
    group = f"count-sketch, d=2^{int(math.log2(d))}, {rows} rows"
    add_target(Target(group, "encode >= 10x NumPy bincount", speedup("numpy encode", "dprec encode"), minimum=10.0))
    add_target(Target(group, "decode >= 10x NumPy", speedup("numpy decode", "dprec decode"), minimum=10.0))
    x = np.random.default_rng(rows).standard_normal(d).astype(np.float32)
    return CountSketch(d, rows, cols, 0x5EED_5CE7_0000_0004), x, group


def _buckets_signs(cs: CountSketch, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ``r``'s buckets and signs from Philox on the fly (what a NumPy user computes)."""
    d, cols = cs.dim, cs.cols
    w = philox.words(cs.seed, d, substream=r, domain=DOMAIN_SKETCH_BUCKET)
    b = ((w.astype(np.uint64) * np.uint64(cols)) >> np.uint64(32)).astype(np.intp)
    s = np.where(philox.words(cs.seed, d, substream=r, domain=DOMAIN_SKETCH_SIGN) >= np.uint32(1 << 31), -1.0, 1.0)
    return b, s.astype(np.float32)


@pytest.mark.parametrize("op", ["encode", "decode"])
@pytest.mark.parametrize("rows", SKETCH_ROWS)
def test_sketch_dprec(measure, quick, rows, op):
    cs, x, group = _sketch_setup(rows, quick)
    if op == "encode":
        measure(group, "dprec encode", lambda: cs.encode(x), rows * x.size, "elem")
    else:
        table = cs.encode(x)
        measure(group, "dprec decode", lambda: cs.decode(table, "mean"), rows * x.size, "elem")


@pytest.mark.parametrize("op", ["encode", "decode"])
@pytest.mark.parametrize("rows", SKETCH_ROWS)
def test_sketch_numpy(measure, quick, rows, op):
    """NumPy with the hashes computed on the fly from Philox, as a NumPy user of the sketch would."""
    cs, x, group = _sketch_setup(rows, quick)
    scale = np.float32(1.0 / rows)

    def encode() -> np.ndarray:
        table = np.empty((rows, cs.cols), dtype=np.float32)
        xs = x * scale
        for r in range(rows):
            b, s = _buckets_signs(cs, r)
            table[r] = np.bincount(b, weights=s * xs, minlength=cs.cols)
        return table

    table = cs.encode(x)

    def decode() -> np.ndarray:
        out = np.zeros(x.size, dtype=np.float32)
        for r in range(rows):
            b, s = _buckets_signs(cs, r)
            out += table[r][b] * s
        return out

    measure(group, f"numpy {op}", encode if op == "encode" else decode, rows * x.size, "elem", rounds=3)


@pytest.mark.parametrize("rows", SKETCH_ROWS)
def test_sketch_torch_scatter_add(measure, quick, rows):
    torch = _torch()
    cs, x, group = _sketch_setup(rows, quick)
    pre = [_buckets_signs(cs, r) for r in range(rows)]  # precomputed: torch gets the tables for free
    bt = [torch.from_numpy(b) for b, _ in pre]
    st = [torch.from_numpy(s) for _, s in pre]
    xt = torch.from_numpy(x) * (1.0 / rows)

    def encode() -> object:
        table = torch.zeros(rows, cs.cols, dtype=torch.float32)
        for r in range(rows):
            table[r].scatter_add_(0, bt[r], st[r] * xt)
        return table

    measure(group, "torch scatter_add (tables given)", encode, rows * x.size, "elem")


# ---------------------------------------------------------------------------------------------- accountant

ACCOUNTANT = "DP-REC accountant, T*B = 4e5 steps, 256 orders"
add_target(Target(ACCOUNTANT, "< 0.5 s", lambda m: m["dprec_epsilon"].seconds if "dprec_epsilon" in m else None,
                  maximum=0.5, unit="s"))


def test_accountant(measure):
    accounting = pytest.importorskip("dprec.accounting", reason="needs SciPy")
    n, t, b, c = 3500, 4000, 100, 1.41
    measure(ACCOUNTANT, "dprec_epsilon", lambda: accounting.dprec_epsilon(
        rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=n**-1.1, bits=None), t * b, "step")


# ---------------------------------------------------------------------------------------------- small update

SMALL = "DP-REC encode of a small update (4 tensors, 2,410 parameters, 7 bits)"
add_target(Target(SMALL, "<= 1.3x its K*d at the large-d rate", overhead("codec.encode, default threads", "large-d rate"),
                  maximum=1.3))
add_target(Target(SMALL, "never slower on 2 threads than on 1",
                  overhead("codec.encode, 2 threads", "codec.encode, 1 thread"), maximum=1.0))

# A small MLP, 64 -> 32 -> 10: 4 tensors, 2,410 parameters.
SMALL_SHAPES = {"fc1.weight": (32, 64), "fc1.bias": (32,), "fc2.weight": (10, 32), "fc2.bias": (10,)}
assert sum(math.prod(s) for s in SMALL_SHAPES.values()) == 2410


@pytest.mark.parametrize("nthreads", [None, 1, 2])
def test_small_update(measure, threads, nthreads):
    from dprec import DPRECCodec

    rng = np.random.default_rng(0)
    update = {k: (rng.standard_normal(s) * 1e-3).astype(np.float32) for k, s in SMALL_SHAPES.items()}
    codec = DPRECCodec(sigma=_SIGMA, bits=7, backend="cpu")
    if nthreads is not None:
        threads(nthreads)
    label = "codec.encode, default threads" if nthreads is None else \
        f"codec.encode, {nthreads} thread{'s' if nthreads > 1 else ''}"
    gen = np.random.default_rng(1)
    measure(SMALL, label, lambda: codec.encode(update, rng=gen, seed=_SEED), 2410 << 7, "cand-elem", rounds=200)


def test_small_update_large_d_rate(measure, quick):
    d = 1 << 14 if quick else 1 << 20
    phi = _phi(d)
    measure(SMALL, "large-d rate", lambda: rec.logits(phi, _SEED, 0, 7, sigma=_SIGMA, backend="cpu"), d << 7,
            "cand-elem")
