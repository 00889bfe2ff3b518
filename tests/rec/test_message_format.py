"""The DP-REC message byte format (dprec.rec.codec module docstring): golden bytes, round
trips, and rejection of truncated, corrupted, wrong-version and trailing bytes."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from dprec.constants import NORMAL_TRANSFORM_VERSION
from dprec.rec.codec import FLAG_UNIFORM_BITS, FORMAT_VERSION, MAGIC, DPRECCodec, DPRECMessage

DIGEST = bytes(range(1, 9))
SEED = 0x0123456789ABCDEF


def recrc(body: bytes) -> bytes:
    """Replace the trailing CRC so that only the intended field is wrong."""
    body = bytes(body[:-4])
    return body + struct.pack("<I", zlib.crc32(body))


def patch(blob: bytes, offset: int, new: bytes) -> bytes:
    return recrc(blob[:offset] + new + blob[offset + len(new) :])


def mixed_message() -> DPRECMessage:
    return DPRECMessage(seed=SEED, bits=(3, 5), indices=(5, 17), layout_digest=DIGEST)


def uniform_message() -> DPRECMessage:
    return DPRECMessage(seed=SEED, bits=(6, 6, 6), indices=(1, 63, 32), layout_digest=DIGEST)


# --------------------------------------------------------------------------------------
# Golden bytes: the documented layout, field by field
# --------------------------------------------------------------------------------------


def test_golden_bytes_mixed_bits():
    blob = mixed_message().to_bytes()
    # indices 5 (3 bits: 1,0,1) then 17 (5 bits: 1,0,0,0,1), LSB first -> 0b10001101
    expected_body = (
        b"DPRC"
        + bytes([1, NORMAL_TRANSFORM_VERSION])
        + struct.pack("<H", 0)  # flags: bits stored per group
        + struct.pack("<Q", SEED)
        + DIGEST
        + struct.pack("<I", 2)
        + bytes([3, 5])
        + bytes([0b10001101])
    )
    assert blob == expected_body + struct.pack("<I", zlib.crc32(expected_body))
    assert blob.hex() == "4450524301010000efcdab896745230101020304050607080200000003058dd26e4a7a"
    assert len(blob) == mixed_message().nbytes == 35


def test_golden_bytes_uniform_bits_and_lsb_first_packing():
    msg = DPRECMessage(seed=SEED, bits=(24,), indices=(0xABCDEF,), layout_digest=DIGEST)
    blob = msg.to_bytes()
    assert blob[:4] == MAGIC and blob[4] == FORMAT_VERSION == 1 and blob[5] == NORMAL_TRANSFORM_VERSION
    assert struct.unpack_from("<H", blob, 6)[0] == FLAG_UNIFORM_BITS
    assert struct.unpack_from("<Q", blob, 8)[0] == SEED
    assert blob[16:24] == DIGEST
    assert struct.unpack_from("<I", blob, 24)[0] == 1
    assert blob[28] == 24  # one bits byte
    assert blob[29:32] == bytes([0xEF, 0xCD, 0xAB])  # little-endian, LSB first
    assert struct.unpack_from("<I", blob, 32)[0] == zlib.crc32(blob[:32])
    assert len(blob) == 36 == msg.nbytes
    assert blob.hex() == "4450524301010100efcdab896745230101020304050607080100000018efcdabe2072741"
    # Uniform bits: 3 groups x 6 bits = 18 bits -> 3 bytes; 1 bits byte.
    assert len(uniform_message().to_bytes()) == 28 + 1 + 3 + 4


def test_indices_cross_byte_boundaries():
    # 7-bit indices straddle bytes; check against a bit-by-bit reference packer.
    r = np.random.default_rng(0)
    bits = tuple(int(b) for b in r.integers(1, 25, size=50))
    indices = tuple(int(r.integers(0, 2**b)) for b in bits)
    msg = DPRECMessage(seed=5, bits=bits, indices=indices, layout_digest=DIGEST)
    blob = msg.to_bytes()
    stream = []
    for k, b in zip(indices, bits):
        stream += [(k >> i) & 1 for i in range(b)]
    stream += [0] * (-len(stream) % 8)
    packed = bytes(sum(stream[i + j] << j for j in range(8)) for i in range(0, len(stream), 8))
    assert blob[28 + len(bits) : -4] == packed


# --------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bits",
    [(1,), (24,), (7,) * 10, (1, 24, 3, 8, 16), tuple(range(1, 25)), (5,) * 1000],
    ids=["1", "24", "7x10", "mixed", "1..24", "5x1000"],
)
def test_round_trip(bits):
    r = np.random.default_rng(len(bits))
    indices = tuple(int(r.integers(0, 2**b)) for b in bits)
    for seed in (0, 1, 2**63, 2**64 - 1):
        msg = DPRECMessage(seed=seed, bits=bits, indices=indices, layout_digest=DIGEST)
        blob = msg.to_bytes()
        assert isinstance(blob, bytes) and len(blob) == msg.nbytes
        back = DPRECMessage.from_bytes(blob)
        assert back == msg
        assert back.seed == seed and back.bits == bits and back.indices == indices and back.layout_digest == DIGEST
        assert DPRECMessage.from_bytes(bytearray(blob)) == msg
        assert DPRECMessage.from_bytes(memoryview(blob)) == msg
    # Extreme indices.
    for fill in (0, 1):
        idx = tuple((2**b - 1) * fill for b in bits)
        m = DPRECMessage(seed=3, bits=bits, indices=idx, layout_digest=DIGEST)
        assert DPRECMessage.from_bytes(m.to_bytes()) == m


def test_round_trip_of_encoded_update():
    r = np.random.default_rng(1)
    upd = {"w": r.standard_normal((4, 5)).astype(np.float32), "b": r.standard_normal(4).astype(np.float32)}
    codec = DPRECCodec(sigma=0.1, bits={"w": 5}, max_group_size=8)
    msg = codec.encode(upd, rng=np.random.default_rng(0), seed=99)
    blob = msg.to_bytes()
    assert len(blob) == codec.layout(upd).message_nbytes
    back = DPRECMessage.from_bytes(blob)
    assert back == msg
    out1, out2 = codec.decode(msg, upd), codec.decode(back, upd)
    for k in upd:
        np.testing.assert_array_equal(out1[k], out2[k])


# --------------------------------------------------------------------------------------
# Rejection
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["DPRC", None, 123, [1, 2, 3], np.zeros(40, np.uint8)])
def test_wrong_type(bad):
    with pytest.raises(TypeError, match="bytes"):
        DPRECMessage.from_bytes(bad)


@pytest.mark.parametrize("make", [mixed_message, uniform_message])
def test_truncated_at_every_length(make):
    blob = make().to_bytes()
    for n in range(len(blob)):
        with pytest.raises(ValueError, match="truncated|CRC"):
            DPRECMessage.from_bytes(blob[:n])
    # The header's own length checks name the truncation.
    for n in (0, 3, 5, 20, 28):
        with pytest.raises(ValueError, match="truncated"):
            DPRECMessage.from_bytes(blob[:n])


def test_truncated_payload_is_named():
    blob = mixed_message().to_bytes()
    with pytest.raises(ValueError, match="truncated: 34 bytes, expected 35"):
        DPRECMessage.from_bytes(blob[:-1])


def test_trailing_bytes():
    blob = mixed_message().to_bytes()
    for extra in (b"\x00", b"\x00" * 7, blob):
        with pytest.raises(ValueError, match="trailing"):
            DPRECMessage.from_bytes(blob + extra)


def test_bad_magic():
    blob = mixed_message().to_bytes()
    for magic in (b"DPRX", b"\x00\x00\x00\x00", b"dprc"):
        with pytest.raises(ValueError, match="magic"):
            DPRECMessage.from_bytes(patch(blob, 0, magic))
    with pytest.raises(ValueError, match="magic"):
        DPRECMessage.from_bytes(b"PK\x03\x04" + bytes(40))


@pytest.mark.parametrize("version", [0, 2, 255])
def test_unsupported_format_version(version):
    blob = patch(mixed_message().to_bytes(), 4, bytes([version]))
    with pytest.raises(ValueError, match=f"unsupported DP-REC message format version {version}"):
        DPRECMessage.from_bytes(blob)


@pytest.mark.parametrize("version", [0, NORMAL_TRANSFORM_VERSION + 1, 255])
def test_normal_transform_version_mismatch(version):
    blob = patch(mixed_message().to_bytes(), 5, bytes([version]))
    with pytest.raises(ValueError, match=f"normal-transform version {version}"):
        DPRECMessage.from_bytes(blob)


@pytest.mark.parametrize("flags", [0x0002, 0x8000, 0xFFFF])
def test_unknown_flags(flags):
    blob = patch(mixed_message().to_bytes(), 6, struct.pack("<H", flags))
    with pytest.raises(ValueError, match="unsupported DP-REC message flags"):
        DPRECMessage.from_bytes(blob)


def test_zero_groups():
    blob = patch(uniform_message().to_bytes(), 24, struct.pack("<I", 0))
    with pytest.raises(ValueError, match="group count is 0"):
        DPRECMessage.from_bytes(blob)


def test_group_count_too_large_for_the_bytes():
    blob = patch(mixed_message().to_bytes(), 24, struct.pack("<I", 2**32 - 1))
    with pytest.raises(ValueError, match="truncated"):
        DPRECMessage.from_bytes(blob)


@pytest.mark.parametrize("b", [0, 25, 255])
def test_bits_out_of_range(b):
    with pytest.raises(ValueError, match=f"bits = {b} is outside 1..24"):
        DPRECMessage.from_bytes(patch(uniform_message().to_bytes(), 28, bytes([b])))
    with pytest.raises(ValueError, match=f"bits of group 1 = {b} is outside 1..24"):
        DPRECMessage.from_bytes(patch(mixed_message().to_bytes(), 29, bytes([b])))


def test_nonzero_padding_bits():
    # 3 groups x 6 bits = 18 bits: the top 6 bits of the last payload byte are padding.
    blob = uniform_message().to_bytes()
    last = 28 + 1 + 2
    assert blob[last] >> 2 == 0
    with pytest.raises(ValueError, match="padding"):
        DPRECMessage.from_bytes(patch(blob, last, bytes([blob[last] | 0x80])))


def test_crc_mismatch():
    blob = bytearray(mixed_message().to_bytes())
    blob[-1] ^= 0x01
    with pytest.raises(ValueError, match="CRC-32 mismatch"):
        DPRECMessage.from_bytes(bytes(blob))


@pytest.mark.parametrize("make", [mixed_message, uniform_message])
def test_every_single_bit_flip_is_rejected(make):
    blob = make().to_bytes()
    for i in range(len(blob) * 8):
        bad = bytearray(blob)
        bad[i // 8] ^= 1 << (i % 8)
        with pytest.raises(ValueError):
            DPRECMessage.from_bytes(bytes(bad))


def test_corrupted_payload_byte_names_corruption():
    r = np.random.default_rng(3)
    bits = (7,) * 40
    msg = DPRECMessage(seed=1, bits=bits, indices=tuple(int(k) for k in r.integers(0, 128, 40)), layout_digest=DIGEST)
    blob = bytearray(msg.to_bytes())
    blob[40] ^= 0x5A
    with pytest.raises(ValueError, match="corrupted"):
        DPRECMessage.from_bytes(bytes(blob))


def test_random_garbage_never_crashes():
    r = np.random.default_rng(4)
    for n in (0, 1, 4, 33, 35, 100):
        for _ in range(20):
            data = r.integers(0, 256, size=n, dtype=np.uint8).tobytes()
            with pytest.raises(ValueError):
                DPRECMessage.from_bytes(data)
            with pytest.raises(ValueError):
                DPRECMessage.from_bytes(MAGIC + bytes([1]) + data)


def test_mismatched_layout_bytes_are_rejected_by_decode():
    r = np.random.default_rng(5)
    upd = {"w": r.standard_normal(12).astype(np.float32)}
    codec = DPRECCodec(sigma=0.1, bits=4)
    blob = codec.encode(upd, rng=np.random.default_rng(0), seed=1).to_bytes()
    # A different digest with a valid CRC parses, but does not decode against this layout.
    forged = patch(blob, 16, bytes(8))
    msg = DPRECMessage.from_bytes(forged)
    with pytest.raises(ValueError, match="layout digest"):
        codec.decode(msg, upd)
    with pytest.raises(ValueError, match="layout digest"):
        codec.decode(forged, upd)
    with pytest.raises(ValueError, match="layout digest"):
        codec.decode(blob, {"w": np.zeros(13, np.float32)})
