"""What every dprec message format shares: byte input, the CRC-32 seal, the tensor-name hash."""

from __future__ import annotations

import struct
import zlib
from typing import Any

#: The trailing CRC-32 of every message (uint32, little-endian).
CRC = struct.Struct("<I")


def as_bytes(data: Any, what: str) -> bytes:
    """``data`` (bytes, bytearray or memoryview) as bytes; TypeError naming ``what`` otherwise."""
    if isinstance(data, memoryview):
        return data.tobytes()
    if isinstance(data, bytearray):
        return bytes(data)
    if not isinstance(data, bytes):
        raise TypeError(f"{what} expects bytes, bytearray or memoryview, got {type(data).__name__}")
    return data


def seal(body: bytes) -> bytes:
    """``body`` followed by its CRC-32 (uint32, little-endian)."""
    return body + CRC.pack(zlib.crc32(body) & 0xFFFFFFFF)


def check_crc(data: bytes, kind: str) -> None:
    """ValueError when the last 4 bytes of a ``kind`` message are not the CRC-32 of the rest."""
    n = len(data)
    (crc,) = CRC.unpack_from(data, n - CRC.size)
    actual = zlib.crc32(data[: n - CRC.size]) & 0xFFFFFFFF
    if crc != actual:
        raise ValueError(f"{kind} message corrupted: CRC-32 mismatch (stored 0x{crc:08x}, computed 0x{actual:08x})")


def hash_tensors(h: Any, names: tuple[str, ...], shapes: tuple[tuple[int, ...], ...]) -> None:
    """Feed the tensor names (UTF-8) and shapes, in canonical order, to the BLAKE2b ``h``."""
    for name, shape in zip(names, shapes):
        raw = name.encode("utf-8", "surrogatepass")
        h.update(struct.pack("<Q", len(raw)) + raw)
        h.update(struct.pack(f"<I{len(shape)}Q", len(shape), *shape))
