"""Bit packing of QMGeo level indices (dprec.qmgeo.pack / unpack, the qmgeo_* packing kernel ops;
docs/qmgeo.md "Wire: ceil(log2 R) bits per coordinate"): the layout, native vs reference, corrupted
payloads, bad input, thread-count independence."""

from __future__ import annotations

import numpy as np
import pytest

from dprec import qmgeo
from dprec._runtime import arrays as _arrays
from dprec._runtime import backends as _backends
from dprec._runtime import dispatch as _dispatch
from dprec.reference import qmgeo as ref
from tests import fake_cuda as fc
from tests.conftest import BACKENDS, requires_native

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module

CHUNK = 1 << 16  # indices per native work item (csrc/cpu/qmgeo_pack.h kQmgeoPackChunk)
BIG = 2 * CHUNK + 13  # three work items, the last one ragged


def _oracle(indices, bits: int) -> bytes:
    """The layout as written in the contract, independent of both implementations: the payload
    is the little-endian integer sum_i idx_i << (i bits), ceil(n bits / 8) bytes."""
    value = 0
    for i, j in enumerate(int(v) for v in indices):
        value |= j << (i * bits)
    return value.to_bytes((len(indices) * bits + 7) // 8, "little")


def _levels_for(bits: int) -> list[int]:
    """A power of two (no index can be out of range) and, for bits > 1, the smallest R of that width."""
    return [1 << bits] + ([(1 << (bits - 1)) + 1] if bits > 1 else [])


def _kernel_accumulate(backend: str, payload: np.ndarray, levels: int, coef: float, low: float, step: float,
                       acc: np.ndarray) -> None:
    kernels = _dispatch.kernels(backend)
    kernels.qmgeo_accumulate(_arrays.read(payload, "payload"), qmgeo.index_bits(levels), levels, coef, low, step,
                             _arrays.read(acc, "acc"))


# ---- the layout -----------------------------------------------------------------------------------


def test_index_bits():
    assert [qmgeo.index_bits(r) for r in (2, 3, 4, 5, 8, 9, 255, 256, 257, 2**15, 2**15 + 1, 2**16)] == [
        1, 2, 2, 3, 3, 4, 8, 8, 9, 15, 16, 16]
    r = np.arange(2, 2**16 + 1)
    bits = np.array([qmgeo.index_bits(int(v)) for v in r])
    assert np.all((1 << (bits - 1)) < r) and np.all(r <= (1 << bits))  # ceil(log2 R), exactly
    assert all(ref.index_bits(int(v)) == b for v, b in zip(r[::97], bits[::97]))
    with pytest.raises(ValueError, match="levels must be in"):
        qmgeo.index_bits(1)
    with pytest.raises(ValueError, match="levels must be in"):
        qmgeo.index_bits(2**16 + 1)
    with pytest.raises(TypeError, match="levels must be an integer"):
        qmgeo.index_bits(8.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_known_answers(backend):
    # b = 3 (R = 8), indices [1, 2, 3, 4, 5]: 15 bits, 2 bytes. Each index LSB first, the stream is
    #   1 0 0 | 0 1 0 | 1 1 0 | 0 0 1 | 1 0 1 | (padding) 0
    # byte 0 = stream bits 0..7 = 1 0 0 0 1 0 1 1 (bit 0 first) = 1 + 16 + 64 + 128 = 0xD1,
    # byte 1 = stream bits 8..15 = 0 0 0 1 1 0 1 0 = 8 + 16 + 64 = 0x58.
    # As an integer: 1 + (2 << 3) + (3 << 6) + (4 << 9) + (5 << 12) = 0x58D1, little-endian.
    payload = qmgeo.pack([1, 2, 3, 4, 5], 8, backend=backend)
    assert payload.dtype == np.uint8 and payload.shape == (2,)
    assert payload.tobytes() == bytes([0xD1, 0x58])
    assert qmgeo.unpack(bytes([0xD1, 0x58]), 8, 5, backend=backend).tolist() == [1, 2, 3, 4, 5]
    # b = 16: each index is its two bytes, little-endian.
    assert qmgeo.pack([0x1234, 0xABCD], 2**16, backend=backend).tobytes() == bytes([0x34, 0x12, 0xCD, 0xAB])
    # b = 1 (R = 2): bit i is index i; 9 bits = 2 bytes, bits 1..7 of byte 1 are padding.
    assert qmgeo.pack([1, 0, 1, 1, 0, 0, 0, 0, 1], 2, backend=backend).tobytes() == bytes([0b1101, 0b1])
    # b = 9 (R = 512): index 0 = 0x1FF fills byte 0 and bit 0 of byte 1; index 1 = 1 is bit 9.
    assert qmgeo.pack([0x1FF, 1], 512, backend=backend).tobytes() == bytes([0xFF, 0x03, 0x00])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", range(1, 17))
def test_layout_matches_the_contract_for_every_width_and_length(backend, bits):
    rng = np.random.default_rng(bits)
    levels = 1 << bits
    for n in list(range(0, 41)) + [255, 256, 257, 1000]:  # every residue mod 8, several times
        idx = rng.integers(0, levels, n)
        if n:
            idx[0], idx[-1] = levels - 1, levels - 1
        payload = qmgeo.pack(idx, levels, backend=backend)
        assert payload.tobytes() == _oracle(idx, bits), n
        assert np.array_equal(qmgeo.unpack(payload, levels, n, backend=backend), idx)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_for_every_number_of_levels(backend):
    # Every R in 2 .. 2**16, a short vector each with 0 and R - 1 and a length that moves through
    # the residues mod 8 (test_layout_... covers every residue for every width). The native
    # backend through the public API; the reference through the functions its backend calls
    # (the public layer's share is the same for both, and this keeps the test to about a second).
    if backend == "reference":
        def pack(idx, levels):
            return ref.pack_indices(idx, ref.index_bits(levels))

        def unpack(payload, levels, n):
            return ref.unpack_indices(payload, ref.index_bits(levels), levels, n)
    else:
        def pack(idx, levels):
            return qmgeo.pack(idx, levels, backend=backend)

        def unpack(payload, levels, n):
            return qmgeo.unpack(payload, levels, n, backend=backend)
    rng = np.random.default_rng(17)
    for levels in range(2, 2**16 + 1):
        n = 2 + levels % 13
        idx = rng.integers(0, levels, n).astype(np.uint16)
        idx[0], idx[-1] = levels - 1, 0
        payload = pack(idx, levels)
        assert payload.size == (n * qmgeo.index_bits(levels) + 7) // 8
        back = unpack(payload, levels, n)
        if not np.array_equal(back, idx):
            raise AssertionError(f"levels = {levels}: {idx.tolist()} came back as {back.tolist()}")


@requires_native
@pytest.mark.parametrize("bits", range(1, 17))
def test_native_and_reference_agree(bits):
    rng = np.random.default_rng(100 + bits)
    for levels in _levels_for(bits):
        for n in (0, 1, 7, 8, 9, 1001, BIG):
            idx = rng.integers(0, levels, n)
            if n:
                idx[-1] = levels - 1
            cpu = qmgeo.pack(idx, levels, backend="cpu")
            npy = qmgeo.pack(idx, levels, backend="reference")
            assert np.array_equal(cpu, npy), (levels, n)  # byte-identical
            assert np.array_equal(qmgeo.unpack(cpu, levels, n, backend="cpu"),
                                  qmgeo.unpack(cpu, levels, n, backend="reference"))
            start = rng.normal(size=n)
            coef, low, step = 0.37, -1.25, 2.5 / (levels - 1)
            acc_cpu, acc_npy = start.copy(), start.copy()
            _kernel_accumulate("cpu", cpu, levels, coef, low, step, acc_cpu)
            _kernel_accumulate("reference", npy, levels, coef, low, step, acc_npy)
            assert np.array_equal(acc_cpu.view(np.uint64), acc_npy.view(np.uint64)), (levels, n)  # bit-identical


@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulate_decodes_and_aggregates(backend):
    # acc zero and coef 1: exactly the dequantized levels low + j step (what dequantize computes);
    # several messages: the float64 expression acc += coef * (low + j * step), one after another.
    levels, w_max = 11, 1.5
    step = 2.0 * w_max / (levels - 1)
    rng = np.random.default_rng(5)
    messages = [rng.integers(0, levels, 777) for _ in range(3)]
    acc = np.zeros(777)
    _kernel_accumulate(backend, qmgeo.pack(messages[0], levels), levels, 1.0, -w_max, step, acc)
    assert np.array_equal(acc, qmgeo.dequantize(messages[0], w_max, levels))
    want = acc.copy()
    for coef, j in zip((0.25, -3.0), messages[1:]):
        _kernel_accumulate(backend, qmgeo.pack(j, levels), levels, coef, -w_max, step, acc)
        want += coef * (-w_max + j.astype(np.float64) * step)
    assert np.array_equal(acc, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_of_every_kind(backend):
    idx = np.arange(24).reshape(2, 3, 4) % 7
    payload = qmgeo.pack(idx, 7, backend=backend)  # any shape, flattened in C order
    assert payload.tobytes() == _oracle(idx.reshape(-1), 3)
    for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
        assert np.array_equal(qmgeo.pack(idx.astype(dtype), 7, backend=backend), payload)
    assert np.array_equal(qmgeo.pack(idx.T, 7, backend=backend), qmgeo.pack(idx.T.copy(), 7, backend=backend))
    assert np.array_equal(qmgeo.pack(idx.reshape(-1).tolist(), 7, backend=backend), payload)
    want = idx.reshape(-1)
    raw = payload.tobytes()
    for form in (raw, bytearray(raw), memoryview(raw), payload, np.frombuffer(raw, np.uint8)):
        back = qmgeo.unpack(form, 7, 24, backend=backend)
        assert back.dtype == np.uint16 and back.shape == (24,) and np.array_equal(back, want)
    # A strided memoryview and a strided array are copied.
    doubled = bytes(b for byte in raw for b in (byte, 0xEE))
    assert np.array_equal(qmgeo.unpack(memoryview(doubled)[::2], 7, 24, backend=backend), want)
    assert np.array_equal(qmgeo.unpack(np.frombuffer(doubled, np.uint8)[::2], 7, 24, backend=backend), want)
    torch = pytest.importorskip("torch")
    assert np.array_equal(qmgeo.pack(torch.from_numpy(idx), 7, backend=backend), payload)
    assert np.array_equal(qmgeo.unpack(torch.from_numpy(payload.copy()), 7, 24, backend=backend), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty(backend):
    payload = qmgeo.pack(np.zeros(0, np.int64), 5, backend=backend)
    assert payload.dtype == np.uint8 and payload.shape == (0,)
    back = qmgeo.unpack(b"", 5, 0, backend=backend)
    assert back.dtype == np.uint16 and back.shape == (0,)


# ---- corrupted payloads ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("levels", "n", "bad_at"), [(5, 9, 6), (3, 4, 0), (300, 17, 16), (2**15 + 1, 3, 1),
                                                     (1000, BIG, CHUNK + 3)])
def test_index_at_or_above_levels_is_refused(backend, levels, n, bad_at):
    bits = qmgeo.index_bits(levels)
    idx = np.random.default_rng(levels).integers(0, levels, n).astype(np.uint16)
    idx[bad_at] = (1 << bits) - 1  # fits the width, but is >= levels (R is not a power of two)
    if n > bad_at + 5:
        idx[bad_at + 5] = levels  # a later bad index: the first one is reported
    payload = ref.pack_indices(idx, bits)  # the reference packs any index below 2**bits
    match = f"payload is corrupted: index i = {bad_at} is {(1 << bits) - 1} >= levels = {levels}"
    with pytest.raises(ValueError, match=match):
        qmgeo.unpack(payload, levels, n, backend=backend)
    acc = np.arange(n, dtype=np.float64)
    with pytest.raises(ValueError, match=match):
        _kernel_accumulate(backend, payload, levels, 1.0, 0.0, 1.0, acc)
    assert np.array_equal(acc, np.arange(n))  # unchanged


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("levels", "n"), [(8, 5), (2, 9), (300, 3), (5, 1)])
def test_nonzero_padding_is_refused(backend, levels, n):
    bits = qmgeo.index_bits(levels)
    payload = qmgeo.pack(np.zeros(n, np.int64), levels, backend=backend)
    spare = 8 * payload.size - n * bits
    for bit in range(8 - spare, 8):  # each padding bit of the last byte on its own
        bad = payload.copy()
        bad[-1] |= 1 << bit
        with pytest.raises(ValueError, match=f"padding bits after the last index \\(the top {spare} bits"):
            qmgeo.unpack(bad, levels, n, backend=backend)
        acc = np.ones(n)
        with pytest.raises(ValueError, match="padding bits .* are not zero"):
            _kernel_accumulate(backend, bad, levels, 1.0, 0.0, 1.0, acc)
        assert np.array_equal(acc, np.ones(n))


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_payload_length_is_refused(backend):
    payload = qmgeo.pack([1, 2, 3, 4, 5], 8, backend=backend).tobytes()  # 2 bytes
    for wrong in (payload[:1], payload + b"\0", b""):
        with pytest.raises(ValueError, match="payload must have ceil\\(count \\* bits / 8\\) = 2 bytes"):
            qmgeo.unpack(wrong, 8, 5, backend=backend)
    with pytest.raises(ValueError, match="payload must have"):
        qmgeo.unpack(payload, 8, 6, backend=backend)  # 18 bits: 3 bytes
    with pytest.raises(ValueError, match="payload must have"):
        qmgeo.unpack(payload, 16, 5, backend=backend)  # 4 bits each: 20 bits, 3 bytes


# ---- bad arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(indices=np.array([0.0, 1.0])), TypeError, "indices must be an integer array"),
        (dict(indices=np.array([True, False])), TypeError, "indices must be an integer array"),
        (dict(indices="01"), TypeError, "indices must be an integer array"),
        (dict(indices=np.array([0, 8])), ValueError, "indices must be in \\[0, levels\\) = \\[0, 8\\)"),
        (dict(indices=np.array([-1, 0])), ValueError, "indices must be in"),
        (dict(indices=np.array([65536 + 3])), ValueError, "indices must be in"),  # would wrap to 3 as uint16
        (dict(levels=1), ValueError, "levels must be in \\[2, 65536\\]"),
        (dict(levels=65537), ValueError, "levels must be in"),
        (dict(levels=8.0), TypeError, "levels must be an integer"),
        (dict(levels=True), TypeError, "levels must be an integer"),
        (dict(backend="gpu"), ValueError, "backend must be one of"),
        (dict(backend="cuda"), ValueError, "QMGeo packing runs on the host"),
    ],
)
def test_pack_bad_arguments(kwargs, error, match):
    args = {"indices": np.array([1, 2, 3]), "levels": 8, **kwargs}
    with pytest.raises(error, match=match):
        qmgeo.pack(args.pop("indices"), args.pop("levels"), **args)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(payload=np.array([1, 2], np.int64)), TypeError, "payload must be bytes, bytearray, memoryview or a uint8"),
        (dict(payload=[0xD1, 0x58]), TypeError, "payload must be bytes"),
        (dict(payload="ab"), TypeError, "payload must be bytes"),
        (dict(payload=np.zeros((1, 2), np.uint8)), ValueError, "payload must be 1-D"),
        (dict(levels=1), ValueError, "levels must be in"),
        (dict(levels="8"), TypeError, "levels must be an integer"),
        (dict(count=-1), ValueError, "count must be in \\[0, "),
        (dict(count=2**40), ValueError, "count must be in"),
        (dict(count=5.0), TypeError, "count must be an integer"),
        (dict(backend=None), ValueError, "backend must be one of"),
        (dict(backend="cuda"), ValueError, "QMGeo unpacking runs on the host"),
    ],
)
def test_unpack_bad_arguments(kwargs, error, match):
    args = {"payload": bytes([0xD1, 0x58]), "levels": 8, "count": 5, **kwargs}
    with pytest.raises(error, match=match):
        qmgeo.unpack(args.pop("payload"), args.pop("levels"), args.pop("count"), **args)


def test_cuda_backend_refuses_packing():
    cuda = _backends.BY_NAME["cuda"]  # its Python side only: nothing reaches dprec._cuda
    a = _arrays.read(np.zeros(2, np.uint8), "payload")
    for call in (lambda: cuda.qmgeo_pack(a, 3, a), lambda: cuda.qmgeo_unpack(a, 3, 8, a),
                 lambda: cuda.qmgeo_accumulate(a, 3, 8, 1.0, 0.0, 1.0, a)):
        with pytest.raises(ValueError, match="QMGeo packing runs on the host"):
            call()


def test_gpu_arrays_are_refused(fake_cuda):
    with pytest.raises(ValueError, match="indices is a GPU array, but QMGeo packing runs on the host"):
        qmgeo.pack(fc.FakeGpuArray(fake_cuda, np.array([1, 2], np.int64)), 4)
    with pytest.raises(ValueError, match="payload is a GPU array, but QMGeo unpacking runs on the host"):
        qmgeo.unpack(fc.FakeGpuArray(fake_cuda, np.array([9], np.uint8)), 4, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulate_refuses_non_finite_parameters(backend):
    payload = qmgeo.pack([1, 2], 4)
    for coef, low, step in ((np.nan, 0.0, 1.0), (1.0, np.inf, 1.0), (1.0, 0.0, -np.inf)):
        acc = np.zeros(2)
        with pytest.raises(ValueError, match="coef, low and step must be finite"):
            _kernel_accumulate(backend, payload, 4, coef, low, step, acc)
        assert not acc.any()


@requires_native
def test_binding_validates_on_its_own():
    from dprec._runtime import native as _native

    core = _native.native()
    idx = np.array([1, 2, 3], np.uint16)
    out = np.empty(2, np.uint8)
    with pytest.raises(ValueError, match="bits must be in \\[1, 16\\]"):
        core.qmgeo_pack(idx, 0, out)
    with pytest.raises(ValueError, match="bits must be in"):
        core.qmgeo_pack(idx, 17, out)
    with pytest.raises(ValueError, match="out must have ceil\\(n \\* bits / 8\\) = 2 bytes"):
        core.qmgeo_pack(idx, 3, np.empty(3, np.uint8))
    with pytest.raises(TypeError, match="indices must have dtype uint16"):
        core.qmgeo_pack(idx.astype(np.int64), 3, out)
    with pytest.raises(ValueError, match="out must be writeable"):
        core.qmgeo_pack(idx, 3, np.frombuffer(b"\0\0", np.uint8))
    core.qmgeo_pack(idx, 3, out)
    back = np.empty(3, np.uint16)
    with pytest.raises(ValueError, match="bits must be ceil\\(log2 levels\\) = 3 for levels = 8, got 4"):
        core.qmgeo_unpack(out, 4, 8, back)
    with pytest.raises(ValueError, match="levels must be in \\[2, 2\\*\\*16\\]"):
        core.qmgeo_unpack(out, 1, 1, back)
    with pytest.raises(ValueError, match="payload must have ceil\\(n \\* bits / 8\\) = 3 bytes for n = 6"):
        core.qmgeo_unpack(out, 3, 8, np.empty(6, np.uint16))
    with pytest.raises(TypeError, match="out must have dtype uint16"):
        core.qmgeo_unpack(out, 3, 8, np.empty(3, np.int32))
    with pytest.raises(TypeError, match="payload must have dtype uint8"):
        core.qmgeo_unpack(out.astype(np.int8), 3, 8, back)
    two_bits = np.empty(1, np.uint8)
    core.qmgeo_pack(idx, 2, two_bits)
    with pytest.raises(ValueError, match="payload is corrupted: index i = 2 is 3 >= levels = 3"):
        core.qmgeo_unpack(two_bits, 2, 3, back)
    with pytest.raises(TypeError, match="acc must have dtype float64"):
        core.qmgeo_accumulate(out, 3, 8, 1.0, 0.0, 1.0, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="acc must be 1-D"):
        core.qmgeo_accumulate(out, 3, 8, 1.0, 0.0, 1.0, np.zeros((3, 1)))
    core.qmgeo_unpack(out, 3, 8, back)
    assert back.tolist() == [1, 2, 3]


# ---- threads ----------------------------------------------------------------------------------------


@requires_native
def test_result_does_not_depend_on_the_thread_count(threads):
    rng = np.random.default_rng(9)
    n = 5 * CHUNK + 3
    inputs = {levels: rng.integers(0, levels, n) for levels in (8, 1000, 2**16)}
    # Bad indices (>= 1000) in work items 4 and 5: item 4's is reported whichever thread ends first.
    bad_idx = np.zeros(5 * CHUNK + 1, np.uint16)
    bad_idx[4 * CHUNK], bad_idx[5 * CHUNK] = 1023, 1020
    bad = ref.pack_indices(bad_idx, 10)
    runs = []
    for count in (1, 2, 3, 8):
        threads(count)
        run = []
        for levels, idx in inputs.items():
            payload = qmgeo.pack(idx, levels, backend="cpu")
            back = qmgeo.unpack(payload, levels, n, backend="cpu")
            assert np.array_equal(back, idx)
            acc = np.full(n, 0.5)
            _kernel_accumulate("cpu", payload, levels, 0.75, -1.0, 1.0 / (levels - 1), acc)
            run.extend([payload, acc])
        with pytest.raises(ValueError, match=f"index i = {4 * CHUNK} is 1023"):
            qmgeo.unpack(bad, 1000, bad_idx.size, backend="cpu")
        runs.append(run)
    for run in runs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(runs[0], run))
