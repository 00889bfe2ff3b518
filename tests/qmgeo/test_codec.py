"""QMGeoCodec, QMGeoMessage and QMGeoLayout (dprec.qmgeo.codec): containers, the byte format,
corruption, aggregation and the accounting it reports. Fixed seeds throughout."""

from __future__ import annotations

import math
import struct
import zlib
from collections import OrderedDict

import numpy as np
import pytest

from dprec import qmgeo
from dprec.qmgeo import QMGeoCodec, QMGeoLayout, QMGeoMessage
from tests import fake_cuda as fc
from tests.conftest import NATIVE, requires_native

fake_cuda = fc.fake_cuda  # the fixture, for pytest to find in this module

BACKENDS = ["cpu", "reference"] if NATIVE else ["reference"]
FAST = BACKENDS[0]


def _update(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "fc.weight": rng.normal(0, 0.4, (5, 7)).astype(np.float32),
        "fc.bias": rng.normal(0, 0.4, 5),  # float64
        "conv": rng.normal(0, 0.4, (2, 3, 3)).astype(np.float16),
    }


def _expected_indices(update: dict, codec: QMGeoCodec, rng_seed: int) -> dict:
    """What encode must produce: tensor t (canonical = sorted order) quantized with Philox group t
    under the one seed drawn from the Generator."""
    out = {}
    for t, name in enumerate(sorted(update)):
        x = np.asarray(update[name]).astype(np.float64)
        out[name] = qmgeo.quantize(x, codec.w_max, codec.levels, codec.p, rng=np.random.default_rng(rng_seed),
                                   group=t, backend="reference")
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_encode_is_quantize_per_tensor_and_decode_gives_the_levels(backend):
    upd = _update()
    codec = QMGeoCodec(w_max=1.0, levels=8, p=0.9, backend=backend)
    msg = codec.encode(upd, rng=np.random.default_rng(42))
    want = _expected_indices(upd, codec, 42)
    flat = np.concatenate([want[k].reshape(-1) for k in sorted(upd)])
    assert np.array_equal(msg.indices(backend=backend), flat)
    assert msg.count == flat.size == codec.layout(upd).num_elements
    dec = codec.decode(msg, upd)
    assert type(dec) is dict and list(dec) == list(upd)  # the template's key order
    for k in upd:
        assert dec[k].dtype == np.float32 and dec[k].shape == upd[k].shape
        np.testing.assert_array_equal(dec[k], qmgeo.dequantize(want[k], 1.0, 8).astype(np.float32))


@requires_native
def test_native_and_reference_codecs_agree_bit_for_bit():
    upd = [np.random.default_rng(1).normal(0, 1, 3000), np.random.default_rng(2).normal(0, 1, (40, 30))]
    for levels, p in [(2, 0.5), (5, 1.0), (16, 0.9), (1000, 0.3), (65536, 0.7)]:
        msgs = {b: QMGeoCodec(1.5, levels, p, backend=b).encode(upd, rng=np.random.default_rng(levels))
                for b in ("cpu", "reference")}
        assert msgs["cpu"].to_bytes() == msgs["reference"].to_bytes()
        w = np.array([0.25, -1.5, 3.0])
        three = [msgs["cpu"]] * 3
        agg = {b: QMGeoCodec(1.5, levels, p, backend=b).aggregate(three, upd, weights=w) for b in ("cpu", "reference")}
        for a, r in zip(agg["cpu"], agg["reference"]):
            assert np.array_equal(a, r)


@pytest.mark.parametrize(
    "make",
    [
        lambda u: u,  # dict
        lambda u: OrderedDict((k, u[k]) for k in reversed(list(u))),
        lambda u: [u[k] for k in u],
        lambda u: tuple(u[k] for k in u),
        lambda u: u["fc.weight"],
    ],
    ids=["dict", "ordereddict", "list", "tuple", "single"],
)
def test_containers_round_trip(make):
    upd = make(_update(3))
    codec = QMGeoCodec(w_max=0.8, levels=6, p=0.6, backend=FAST)
    msg = QMGeoMessage.from_bytes(codec.encode(upd, rng=np.random.default_rng(0)).to_bytes())
    dec = codec.decode(msg, upd)
    assert type(dec) is type(upd)
    if isinstance(upd, dict):
        assert list(dec) == list(upd)
    leaves = list(upd.values()) if isinstance(upd, dict) else list(upd) if isinstance(upd, (list, tuple)) else [upd]
    out = list(dec.values()) if isinstance(dec, dict) else list(dec) if isinstance(dec, (list, tuple)) else [dec]
    levels = qmgeo.dequantize(np.arange(6), 0.8, 6).astype(np.float32)
    for x, y in zip(leaves, out):
        assert y.shape == np.shape(x) and y.dtype == np.float32
        assert np.isin(y, levels).all()
        # every value is a level next to the input or further out by the geometric offset; the error of the
        # clipped value is at most 2 w_max
        assert np.all(np.abs(y - np.clip(np.asarray(x, np.float64), -0.8, 0.8)) <= 1.6 + 1e-6)


def test_pytorch_state_dict():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    codec = QMGeoCodec(w_max=1.0, levels=16, p=1.0, backend=FAST)
    msg = codec.encode(sd, rng=np.random.default_rng(1))
    as_numpy = {k: v.numpy() for k, v in sd.items()}
    assert msg == codec.encode(as_numpy, rng=np.random.default_rng(1))  # same bits from tensors and arrays
    dec = codec.decode(msg.to_bytes(), sd)
    assert list(dec) == list(sd)
    for k, v in dec.items():
        assert isinstance(v, torch.Tensor) and v.dtype == torch.float32 and v.shape == sd[k].shape
        # p = 1: plain stochastic rounding, the decoded value is one of the two levels around the input
        assert torch.all((v - sd[k]).abs() <= codec.step + 1e-6)
    agg = codec.aggregate([msg, msg], sd)
    for k in sd:
        assert torch.equal(agg[k], dec[k])  # mean of two equal messages, exactly


def test_aggregate_is_the_weighted_float64_sum():
    upd = _update(4)
    codec = QMGeoCodec(w_max=1.0, levels=9, p=0.5, backend=FAST)
    msgs = [codec.encode(upd, rng=np.random.default_rng(i)) for i in range(5)]
    w = np.array([0.1, 2.0, -0.7, 1e-3, 5.5])
    agg = codec.aggregate(msgs, upd, weights=w)
    decoded = [codec.decode(m, upd) for m in msgs]
    for k in upd:
        acc = np.zeros(upd[k].shape)
        for c, d in zip(w, decoded):
            acc = acc + c * d[k].astype(np.float64)
        np.testing.assert_allclose(agg[k], acc.astype(np.float32), rtol=1e-6, atol=1e-6)
    mean = codec.aggregate(msgs, upd)
    for k in upd:
        np.testing.assert_allclose(mean[k], np.mean([d[k] for d in decoded], axis=0), rtol=1e-6, atol=1e-7)


def test_the_mean_of_many_clients_is_unbiased_at_p_one():
    x = np.linspace(-0.95, 0.95, 50)
    codec = QMGeoCodec(w_max=1.0, levels=5, p=1.0, backend=FAST)
    rng = np.random.default_rng(9)
    n = 2000
    mean = codec.aggregate([codec.encode(x, rng=rng) for _ in range(n)], x)
    theta = (x + 1.0) / codec.step % 1.0
    se = codec.step * np.sqrt(theta * (1 - theta) / n)
    assert np.all(np.abs(mean - x) <= 5 * se + 1e-6)  # 5 standard errors per coordinate


def test_encode_info_and_private_seed():
    x = np.array([-3.0, -1.0, 0.2, 0.9, 1.5, 7.0])
    codec = QMGeoCodec(w_max=1.0, levels=4, p=0.5, backend=FAST)
    msg, info = codec.encode(x, rng=np.random.default_rng(0), return_info=True)
    assert (info.elements, info.clipped, info.max_abs) == (6, 3, 7.0)
    assert msg == codec.encode(x, rng=np.random.default_rng(0))
    # without rng every message draws a fresh seed from the OS: 200 coordinates at p = 0.5 never repeat
    y = np.linspace(-0.9, 0.9, 200)
    assert codec.encode(y).payload != codec.encode(y).payload


def test_message_bytes_and_sizes():
    codec = QMGeoCodec(w_max=2.0, levels=5, p=0.5)  # 3 bits
    x = np.zeros(11)
    layout = codec.layout(x)
    msg = codec.encode(x, rng=np.random.default_rng(1))
    blob = msg.to_bytes()
    assert len(blob) == msg.nbytes == layout.message_nbytes == 32 + math.ceil(11 * 3 / 8)
    assert blob[:4] == b"QMGO" and blob[4] == 1 and blob[5] == 3
    assert struct.unpack_from("<HIQ", blob, 6)[1] == 5 and struct.unpack_from("<Q", blob, 20)[0] == 11
    assert blob[12:20] == layout.digest == msg.layout_digest
    assert QMGeoMessage.from_bytes(bytearray(blob)) == msg == QMGeoMessage.from_bytes(memoryview(blob))
    assert "levels=5" in repr(msg) and "3 bits" in layout.describe().replace("(3 bits each)", "3 bits")


def _valid_blob() -> bytes:
    codec = QMGeoCodec(w_max=1.0, levels=6, p=0.7)
    return codec.encode(np.linspace(-1, 1, 13), rng=np.random.default_rng(3)).to_bytes()


def test_every_corruption_truncation_and_extension_is_refused():
    blob = _valid_blob()
    for i in range(len(blob)):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(blob)
            bad[i] ^= flip
            with pytest.raises(ValueError):
                QMGeoMessage.from_bytes(bytes(bad))
    for n in range(len(blob)):
        with pytest.raises(ValueError, match="truncated|bad magic"):
            QMGeoMessage.from_bytes(blob[:n])
    with pytest.raises(ValueError, match="trailing bytes"):
        QMGeoMessage.from_bytes(blob + b"\0")
    with pytest.raises(TypeError, match="bytes"):
        QMGeoMessage.from_bytes("QMGO")


def _reseal(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


@pytest.mark.parametrize(
    ("offset", "value", "match"),
    [
        (0, b"DPRC", "bad magic"),
        (4, b"\x02", "format version 2"),
        (5, b"\x04", "needs 3"),
        (6, b"\x01\x00", "flags"),
        (8, struct.pack("<I", 1), "levels = 1"),
        (8, struct.pack("<I", 65537), "levels = 65537"),
        (20, struct.pack("<Q", 0), "count 0"),
        (20, struct.pack("<Q", 14), "truncated"),
        (20, struct.pack("<Q", 10), "trailing"),
    ],
)
def test_header_fields_are_checked_even_with_a_valid_crc(offset, value, match):
    blob = bytearray(_valid_blob())
    blob[offset : offset + len(value)] = value
    with pytest.raises(ValueError, match=match):
        QMGeoMessage.from_bytes(_reseal(bytes(blob[:-4])))


@pytest.mark.parametrize("backend", BACKENDS)
def test_forged_payloads_are_refused_at_decode(backend):
    codec = QMGeoCodec(w_max=1.0, levels=6, p=0.7, backend=backend)  # 3 bits, indices 6 and 7 invalid
    x = np.linspace(-1, 1, 13)  # 39 bits: one padding bit
    msg = codec.encode(x, rng=np.random.default_rng(3))
    payload = bytearray(msg.payload)
    payload[0] |= 0x07  # index 0 := 7 >= R
    forged = QMGeoMessage(6, 13, bytes(payload), msg.layout_digest)
    blob = forged.to_bytes()  # a valid CRC: the forger computed it
    with pytest.raises(ValueError, match="index|levels"):
        codec.decode(blob, x)
    with pytest.raises(ValueError, match="index|levels"):
        codec.aggregate([msg, blob], x)
    padded = bytearray(msg.payload)
    padded[-1] |= 0x80
    with pytest.raises(ValueError, match="padding"):
        codec.decode(QMGeoMessage(6, 13, bytes(padded), msg.layout_digest), x)


def test_layout_digest_ties_messages_to_codec_and_template():
    upd = _update()
    codec = QMGeoCodec(w_max=1.0, levels=8, p=0.9)
    msg = codec.encode(upd, rng=np.random.default_rng(0))
    for other in (QMGeoCodec(1.0, 8, 0.8), QMGeoCodec(1.0 + 1e-12, 8, 0.9), QMGeoCodec(1.0, 9, 0.9)):
        with pytest.raises(ValueError, match="layout digest"):
            other.decode(msg, upd)
    renamed = {("x" + k): v for k, v in upd.items()}
    with pytest.raises(ValueError, match="layout digest"):
        codec.decode(msg, renamed)
    reshaped = dict(upd, **{"fc.weight": upd["fc.weight"].reshape(7, 5)})
    with pytest.raises(ValueError, match="layout digest"):
        codec.decode(msg, reshaped)
    layout = codec.layout(upd)
    assert isinstance(layout, QMGeoLayout) and layout.names == ("conv", "fc.bias", "fc.weight")
    assert layout.offsets == (0, 18, 23) and layout.num_elements == 58 and layout.index_bits == 3


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: QMGeoCodec(0.0, 8, 0.5), ValueError, "w_max"),
        (lambda: QMGeoCodec(1.0, 1, 0.5), ValueError, "levels"),
        (lambda: QMGeoCodec(1.0, 8.0, 0.5), TypeError, "levels"),
        (lambda: QMGeoCodec(1.0, 8, 0.0), ValueError, "p must be"),
        (lambda: QMGeoCodec(1.0, 8, 0.5, backend="cuda"), ValueError, "runs on the host"),
        (lambda: QMGeoCodec(1.0, 8, 0.5, backend="nope"), ValueError, "backend"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).encode({"a": np.arange(3)}), TypeError, r"update\['a'\]"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).encode({"a": np.array([0.0, np.nan])}), ValueError, r"update\['a'\].*NaN"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).encode({"a": np.zeros(0)}), ValueError, "must not be empty"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).encode({}), ValueError, "empty"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).encode(np.zeros(3), return_info=1), TypeError, "return_info"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).decode(b"junk", np.zeros(3)), ValueError, "bad magic"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).decode(3, np.zeros(3)), TypeError, "QMGeoMessage"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).aggregate([], np.zeros(3)), ValueError, "messages is empty"),
        (lambda: QMGeoCodec(1.0, 8, 0.5).aggregate(b"x", np.zeros(3)), TypeError, "single"),
        (lambda: QMGeoMessage(8, 3, b"\0", b"\0" * 8), ValueError, "payload must have"),
        (lambda: QMGeoMessage(8, 0, b"", b"\0" * 8), ValueError, "count"),
        (lambda: QMGeoMessage(8, 3, b"\0\0", b"\0" * 7), ValueError, "layout_digest"),
        (lambda: QMGeoMessage(8, 3, "ab", b"\0" * 8), TypeError, "payload"),
    ],
)
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_gpu_updates_and_templates_are_refused(fake_cuda):
    codec = QMGeoCodec(1.0, 8, 0.5)
    host = np.linspace(-1, 1, 6, dtype=np.float32)
    gpu = fc.FakeGpuArray(fake_cuda, host)
    with pytest.raises(ValueError, match=r"update\['w'\] is on cuda:0, but QMGeoCodec runs on the host"):
        codec.encode({"w": gpu})
    msg = codec.encode({"w": host}, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="QMGeoCodec runs on the host"):
        codec.decode(msg, {"w": gpu})
    with pytest.raises(ValueError, match="must be on one device"):
        codec.aggregate([msg], {"w": gpu, "x": host})


def test_aggregate_weights_are_checked():
    codec = QMGeoCodec(1.0, 4, 0.5)
    x = np.zeros(4)
    msgs = [codec.encode(x, rng=np.random.default_rng(i)) for i in range(2)]
    with pytest.raises(ValueError, match=r"weights must have shape \(2,\)"):
        codec.aggregate(msgs, x, weights=[1.0])
    with pytest.raises(ValueError, match="NaN or infinite"):
        codec.aggregate(msgs, x, weights=[1.0, np.nan])
    with pytest.raises(TypeError, match="real numbers"):
        codec.aggregate(msgs, x, weights=["a", "b"])
    with pytest.raises(ValueError, match="float32 maximum"):
        codec.aggregate(msgs, x, weights=[3e38, 3e38])


# --------------------------------------------------------------------------------------------- accounting

scipy = pytest.importorskip("scipy")


def test_accounting_reports_the_exact_divergence_of_the_implemented_pmf():
    from dprec.accounting import Accountant, QMGeoEvent
    from dprec.accounting.qmgeo import qmgeo_rdp

    codec = QMGeoCodec(w_max=1.0, levels=8, p=0.9)
    template = {"a": np.zeros((10, 3)), "b": np.zeros(5)}
    orders = [2.0, 4.0, 16.0]
    # the whole interval: infinite (the end points are quantized deterministically)
    assert np.all(np.isinf(codec.rdp(template, orders)))
    assert math.isinf(codec.epsilon(template, delta=1e-5))
    # coordinates promised to lie strictly between levels: finite, d = 35 times one coordinate's worst case
    step = codec.step
    grid = -1.0 + step * (np.arange(7) + 0.5)
    got = codec.rdp(template, orders, inputs=grid)
    want = qmgeo_rdp(orders, 8, 0.9, dim=35, inputs=grid, w_max=1.0)
    assert np.all(np.isfinite(got)) and np.array_equal(got, want)
    one = qmgeo_rdp(orders, 8, 0.9, dim=1, inputs=grid, w_max=1.0)
    np.testing.assert_allclose(got, 35 * one, rtol=1e-12)
    event = codec.privacy_event(codec.layout(template), inputs=grid, sampling_rate=0.1)
    assert isinstance(event, QMGeoEvent)
    # The codec's guarantee is against the server for the zero-out relation (QMGeo is a local randomizer);
    # Accountant() defaults to central/add_remove, for which QMGeo has no bound.
    acc = Accountant(threat_model="server", relation="zero").compose(event, 20)
    eps = codec.epsilon(template, delta=1e-5, rounds=20, sampling_rate=0.1, inputs=grid)
    assert math.isfinite(eps) and eps == acc.get_epsilon(1e-5)
    g = codec.guarantee(template, delta=1e-5, rounds=20, sampling_rate=0.1, inputs=grid)
    assert (g.mechanism, g.threat_model, g.relation, g.epsilon) == ("qmgeo", "server", "zero", eps)
    assert math.isinf(g.epsilons["add_remove"]) and "adds or removes a message" in g.reasons["add_remove"]
    for tm in ("central", "messages"):  # post-processing: the same number for the weaker observers
        assert codec.epsilon(template, delta=1e-5, rounds=20, sampling_rate=0.1, inputs=grid, threat_model=tm) == eps
    assert math.isinf(codec.epsilon(template, delta=1e-5, rounds=20, inputs=grid, relation="add_remove"))
    with pytest.raises(ValueError, match="threat_model must be one of"):
        codec.epsilon(template, delta=1e-5, inputs=grid, threat_model="curious")
    with pytest.raises(ValueError, match="relation must be one of"):
        codec.guarantee(template, delta=1e-5, inputs=grid, relation="swap")
    # amplification by sampling, where the per-round divergence is moderate (p = 0.1 spreads mass, d = 4)
    spread = QMGeoCodec(w_max=1.0, levels=8, p=0.1)
    eps = [spread.epsilon(np.zeros(4), delta=1e-5, rounds=20, sampling_rate=q, inputs=grid) for q in (1.0, 0.1, 0.01)]
    assert eps[0] > eps[1] > eps[2] > 0


def test_paper_formulas_reproduce_the_papers_numbers():
    d, kappa = 3562, 0.005333
    for levels, want in [(8, 2.626), (16, 4.492)]:
        f = QMGeoCodec(1.0, levels, 0.9).paper_formulas(np.zeros(d), sampling_rate=kappa)
        assert round(f.eq27_abs, 3) == want and f.alpha == 2.0
        assert f.eq20 == pytest.approx(-(math.log(0.9) + (levels - 2) * math.log(0.1)))
        assert f.eq26 == pytest.approx(d * kappa * f.eq20)
    plain = QMGeoCodec(1.0, 8, 1.0).paper_formulas(np.zeros(3))
    assert math.isnan(plain.eq27_abs) and math.isinf(plain.eq20)
