"""Untrusted bytes and configurations (issue 33): the reproducers of the review, kept as regression
tests. Flower's (replays, the client mod's checks, weights) are in tests/integrations/test_flower.py."""

from __future__ import annotations

import struct
import subprocess
import sys
import tracemalloc
import zlib

import numpy as np
import pytest

import dprec
import dprec.secagg
from dprec import DPRECMessage, QMGeoMessage


def _crafted_dprec(nbytes: int, digest: bytes = b"\0" * 8) -> bytes:
    """A well-formed DP-REC message of 1-bit groups filling ``nbytes`` (uniform bits, valid CRC)."""
    groups = (nbytes - 33 - 4) * 8
    body = struct.pack("<4sBBHQ8sI", b"DPRC", 1, 1, 1, 123, digest, groups) + bytes([1]) + bytes(groups // 8)
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def _peak_bytes(call) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    try:
        call()
        err = None
    except BaseException as e:  # noqa: BLE001 - returned to the test
        err = e
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, err


TEMPLATE = {"conv": np.zeros((4, 3, 3), np.float32), "fc": np.zeros((10, 8), np.float32)}


# ---- item 1: a crafted DP-REC message is refused before any per-group work ------------------------


@pytest.mark.parametrize("nbytes", [1 << 20, 8 << 20])
def test_crafted_message_is_refused_against_the_layout_without_per_group_memory(nbytes):
    # Before: 1 MiB parsed group by group (8 million groups) before the digest was compared: about 10 s
    # and 500 MiB. Now: the length does not match the server's layout, refused at once.
    codec = dprec.DPRECCodec(sigma=0.1, bits=7)
    layout = codec.layout(TEMPLATE)
    blob = _crafted_dprec(nbytes)
    for call in (lambda: DPRECMessage.from_bytes(blob, layout), lambda: codec.decode(blob, TEMPLATE),
                 lambda: codec.aggregate([blob], TEMPLATE)):
        peak, err = _peak_bytes(call)
        assert isinstance(err, ValueError) and "expected layout" in str(err), err
        assert peak < 64 * 1024, peak  # nothing in proportion to the 8 * nbytes groups claimed


def test_message_of_the_right_length_but_another_layout_is_refused_before_per_group_work():
    codec = dprec.DPRECCodec(sigma=0.1, bits=1, max_group_size=1)
    template = {"w": np.zeros(64 * 1024, np.float32)}  # 65,536 one-bit groups: 8 KiB of indices
    layout = codec.layout(template)
    good = codec.encode({"w": np.ones(64 * 1024, np.float32)}, seed=3).to_bytes()
    assert len(good) == layout.message_nbytes
    forged = bytearray(good)
    forged[16:24] = b"\1" * 8  # another digest, same length, CRC fixed
    forged[-4:] = struct.pack("<I", zlib.crc32(bytes(forged[:-4])) & 0xFFFFFFFF)
    peak, err = _peak_bytes(lambda: DPRECMessage.from_bytes(bytes(forged), layout))
    assert isinstance(err, ValueError) and "expected layout" in str(err), err
    assert peak < 16 * 1024, peak
    assert DPRECMessage.from_bytes(good, layout) == DPRECMessage.from_bytes(good)  # the honest one parses


def test_bits_field_against_the_layout():
    codec = dprec.DPRECCodec(sigma=0.1, bits={"conv": 3, "fc": 5})
    layout = codec.layout(TEMPLATE)
    msg = codec.encode({k: np.ones_like(v) for k, v in TEMPLATE.items()}, seed=1)
    blob = bytearray(msg.to_bytes())
    assert DPRECMessage.from_bytes(bytes(blob), layout) == msg
    blob[28], blob[29] = blob[29], blob[28]  # swap two groups' bits (same total: same length)
    blob[-4:] = struct.pack("<I", zlib.crc32(bytes(blob[:-4])) & 0xFFFFFFFF)
    with pytest.raises(ValueError, match="bits differ"):
        DPRECMessage.from_bytes(bytes(blob), layout)


def test_without_a_layout_the_parse_is_vectorized_and_exact():
    # A message of many non-uniform groups round-trips (the vectorized bits check and unpack).
    r = np.random.default_rng(0)
    bits = r.integers(1, 25, size=5000).tolist()
    idx = [int(r.integers(0, 1 << b)) for b in bits]
    m = DPRECMessage(seed=5, bits=bits, indices=idx, layout_digest=b"\7" * 8)
    assert DPRECMessage.from_bytes(m.to_bytes()) == m
    bad = bytearray(m.to_bytes())
    bad[28 + 4000] = 25  # group 4000's bits out of range, CRC fixed
    bad[-4:] = struct.pack("<I", zlib.crc32(bytes(bad[:-4])) & 0xFFFFFFFF)
    with pytest.raises(ValueError, match="bits of group 4000 = 25"):
        DPRECMessage.from_bytes(bytes(bad))


def test_layout_argument_is_checked():
    with pytest.raises(TypeError, match="layout must be a Layout"):
        DPRECMessage.from_bytes(_crafted_dprec(64), layout="x")
    with pytest.raises(TypeError, match="layout must be a QMGeoLayout"):
        QMGeoMessage.from_bytes(b"QMGO", layout=3)


def test_crafted_qmgeo_message_is_refused_against_the_layout():
    qcodec = dprec.QMGeoCodec(w_max=1.0, levels=4, p=0.5)
    layout = qcodec.layout(TEMPLATE)
    count = 8 << 20
    body = struct.pack("<4sBBHI8sQ", b"QMGO", 1, 1, 0, 2, b"\0" * 8, count) + bytes(count // 8)
    blob = body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)
    peak, err = _peak_bytes(lambda: QMGeoMessage.from_bytes(blob, layout))
    assert isinstance(err, ValueError) and "expected layout" in str(err), err
    assert peak < 64 * 1024, peak
    with pytest.raises(ValueError, match="expected layout"):
        qcodec.decode(blob, TEMPLATE)


# ---- item 2: QMGeo with a level spacing that underflows ------------------------------------------


def _in_subprocess(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("call", [
    "dprec.qmgeo.quantize(np.linspace(-1, 1, 16), 5e-324, 8, 0.5)",
    "dprec.qmgeo.quantize(np.linspace(-1, 1, 16), 5e-324, 8, 0.5, backend='reference')",
    "dprec.QMGeoCodec(w_max=1e-321, levels=65536, p=0.5)",
    "dprec.qmgeo.dequantize(np.arange(3), 1e-310, 65536)",
    "dprec.qmgeo.quantize(np.ones(4), 1e308, 8, 0.5)",
    "dprec.qmgeo.quantize(np.array([1.0]), 2.0**1023, 8, 0.5)",  # the second review: 2 w_max = inf, SIGSEGV
])
def test_qmgeo_w_max_whose_spacing_is_not_a_normal_float_is_refused(call):
    # Before: the native kernel crashed (SIGSEGV) and the reference raised IndexError.
    proc = _in_subprocess(
        "import numpy as np, dprec\n"
        f"try:\n    {call}\nexcept ValueError as e:\n    assert 'w_max' in str(e), e\n    print('refused')\n"
    )
    assert proc.returncode == 0 and "refused" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def test_qmgeo_smallest_w_max_still_works():
    from dprec.qmgeo.quantizer import check_w_max

    tiny = np.finfo(np.float64).tiny
    w_max = tiny * 7 / 2 * 1.0000001  # just above the smallest w_max for 8 levels
    assert check_w_max(w_max, 8) == w_max
    j = dprec.qmgeo.quantize(np.linspace(-1, 1, 64) * w_max, w_max, 8, 0.5)
    assert j.min() >= 0 and j.max() <= 7


# ---- item 7: numeric arguments that overflow or underflow an internal quantity ---------------------


@pytest.mark.parametrize("pipeline", ["DDGPipeline", "SkellamPipeline"])
@pytest.mark.parametrize("kw", [
    dict(clip=1.0, noise_stddev=1e154), dict(clip=1e308, noise_stddev=1.0),  # the review's: ZeroDivisionError
    dict(clip=1e200, noise_stddev=1.0),  # OverflowError of float ** (found by the second review)
    dict(clip=1e-200, noise_stddev=1e-200),  # the scale overflows: ZeroDivisionError
])
def test_secagg_pipeline_scale_out_of_range_is_a_value_error(pipeline, kw):
    cls = getattr(dprec.secagg, pipeline)
    with pytest.raises(ValueError, match="out of range for bits"):
        cls(100, bits=32, num_clients=10, seed=3, **kw)


@pytest.mark.parametrize("pipeline", ["DDGPipeline", "SkellamPipeline"])
def test_secagg_pipeline_integer_noise_that_underflows_is_refused_up_front(pipeline):
    # Before: Skellam failed only at encode time, with a message about its sampler's mu.
    cls = getattr(dprec.secagg, pipeline)
    with pytest.raises(ValueError, match="noise_stddev = 1e-300 is too small"):
        cls(100, clip=1.0, bits=32, num_clients=10, seed=3, noise_stddev=1e-300)


@pytest.mark.parametrize("rounds", [1e308, 10**308, 2**53 + 1])
def test_accounting_counts_beyond_float64_are_refused(rounds):
    # Before: OverflowError from deep inside the accountant.
    from dprec.accounting import dprec_epsilon

    with pytest.raises(ValueError, match="rounds must be <= 2\\*\\*53"):
        dprec_epsilon(clip_multiplier=1.0, bits=7, rounds=rounds, num_clients=100, clients_per_round=10, delta=1e-5)


@pytest.mark.parametrize("dtype", [None, "float32"])
def test_centered_lift_scale_that_overflows_is_refused(dtype):
    # Before: +-inf in the result, silently.
    x = np.array([1, 2**31, 5], dtype=np.uint32)
    with pytest.raises(ValueError, match="scale = .* is too large"):
        dprec.secagg.centered_lift(x, 32, scale=1e308, dtype=dtype)
    ok = dprec.secagg.centered_lift(x, 32, scale=1e290)
    assert np.isfinite(ok).all()


def test_torch_reference_on_the_meta_device_is_refused():
    torch = pytest.importorskip("torch")
    import dprec.torch as dpt

    model = torch.nn.Linear(4, 2)
    meta = {k: v.to("meta") for k, v in model.state_dict().items()}
    # Before: NotImplementedError ("Cannot copy out of meta tensor").
    with pytest.raises(ValueError, match=r"reference\['weight'\] is on the meta device"):
        dpt.model_update(model, meta)
    with pytest.raises(ValueError, match="model.* is on the meta device"):
        dpt.model_update(torch.nn.Linear(4, 2).to("meta"), model)


@pytest.mark.parametrize("what", ["sequence", "matrix", "total"])
def test_secagg_payload_of_another_size_is_refused_by_its_shape(what):
    # Before: aggregate summed any length (a 10^8-element message: 2.7 s, 380 MiB, accepted) and decode
    # lifted the whole total before the rotation refused it.
    pipe = dprec.secagg.DDGPipeline(1000, clip=10.0, bits=32, noise_stddev=1.0, num_clients=2, seed=4)
    big = np.zeros(1 << 24, np.uint32)
    call = {
        "sequence": lambda: pipe.aggregate([big]),
        "matrix": lambda: pipe.aggregate(big.reshape(1 << 12, 1 << 12)),
        "total": lambda: pipe.decode(big),
    }[what]
    peak, err = _peak_bytes(call)
    assert isinstance(err, ValueError) and "1024" in str(err), err
    assert peak < 64 * 1024, peak


def test_dprec_accounting_extreme_clip_multipliers_and_message_counts():
    # Found by the second review: a tiny c failed on a rounding artefact (a divergence of -9e-16), a huge one
    # gave "rdp must not contain NaN" without naming it, and rounds * clients_per_round beyond 2**53 a TypeError.
    from dprec.accounting import dprec_epsilon

    base = dict(clip_multiplier=1.0, bits=7, rounds=10, num_clients=100, clients_per_round=10, delta=1e-5)
    assert 0.0 <= dprec_epsilon(**{**base, "clip_multiplier": 1e-10}).epsilon < 0.1
    with pytest.raises(ValueError, match="clip_multiplier must be at most 1e\\+100"):
        dprec_epsilon(**{**base, "clip_multiplier": 1e200})
    with pytest.raises(ValueError, match="rounds \\* clients_per_round must be <= 2\\*\\*53"):
        dprec_epsilon(**{**base, "rounds": 2**52, "clients_per_round": 2**20, "num_clients": 2**40})
