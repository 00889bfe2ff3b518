"""The DP-REC wire format: :class:`DPRECMessage` (one client's seed and indices), its bytes,
and the :class:`Layout` of groups whose digest ties a message to the codec and template that
made it. Pure Python and NumPy: servers can parse and check messages without any kernel.
:mod:`dprec.rec.codec` re-exports every public name.

:meth:`DPRECMessage.to_bytes` writes format version :data:`FORMAT_VERSION`: a 28-byte header
(magic ``b"DPRC"``, versions, flags, seed, layout digest, group count), the bits per group, the
indices packed least significant bit first, and a CRC-32; ``33 + ceil(S/8)`` bytes with uniform
bits (``S`` the total bits), ``32 + G + ceil(S/8)`` otherwise. :meth:`DPRECMessage.from_bytes`
takes exactly one message and raises ValueError naming the problem for truncated input, trailing
bytes, a bad magic, an unsupported format version or flag, a normal-transform version other than
this build's, a CRC mismatch, bits out of range and non-zero padding; and TypeError for an object
that is not bytes-like. Decoding or aggregating with a template or codec whose names, shapes,
group split, bits or sigma differ from the encoder's (another :attr:`Layout.digest`) raises
ValueError; ``clip_multiplier`` and the backend do not enter the digest.

See *Randomness contract and wire formats* in the documentation for every byte and the digest.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._runtime.validation import check_bits, check_int, check_seed
from .._runtime.wire import CRC, as_bytes, check_crc, hash_tensors, seal
from ..constants import MAX_BITS, MIN_BITS, NORMAL_TRANSFORM_VERSION

__all__ = ["DPRECMessage", "Layout", "LayoutGroup", "FORMAT_VERSION", "MAGIC", "FLAG_UNIFORM_BITS"]

#: First bytes of every serialized message.
MAGIC = b"DPRC"
#: Version of the byte format written by :meth:`DPRECMessage.to_bytes`.
FORMAT_VERSION = 1
#: Flag: every group has the same bits (stored once).
FLAG_UNIFORM_BITS = 0x0001
_KNOWN_FLAGS = FLAG_UNIFORM_BITS

_HEADER = struct.Struct("<4sBBHQ8sI")  # magic, version, transform, flags, seed, digest, G
_DIGEST_SIZE = 8
_MAX_GROUPS = 0xFFFFFFFF


@dataclass(frozen=True, eq=True)
class DPRECMessage:
    """One client's compressed update: the seed and the chosen index of every group.

    Instances are immutable and validated on construction. The ``seed`` is shared
    randomness (the server learns it); the indices are the only data-dependent content.

    Attributes
    ----------
    seed : int
        The 64-bit seed of the candidate streams.
    bits : tuple of int
        Bits of each group (1..24), in group order.
    indices : tuple of int
        The chosen candidate of each group, ``0 <= indices[g] < 2**bits[g]``.
    layout_digest : bytes
        8-byte digest of the encoder's :class:`Layout` (names, shapes, groups, bits, sigma).
    """

    seed: int
    bits: tuple[int, ...]
    indices: tuple[int, ...]
    layout_digest: bytes
    _nbytes: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        seed = check_seed(self.seed)
        if isinstance(self.bits, (str, bytes)) or not isinstance(self.bits, (Sequence, np.ndarray)):
            raise TypeError(f"bits must be a sequence of int, got {type(self.bits).__name__}")
        if isinstance(self.indices, (str, bytes)) or not isinstance(self.indices, (Sequence, np.ndarray)):
            raise TypeError(f"indices must be a sequence of int, got {type(self.indices).__name__}")
        bits = tuple(check_bits(b, f"bits[{g}]") for g, b in enumerate(_as_list(self.bits)))
        raw_idx = _as_list(self.indices)
        if not bits:
            raise ValueError("a message must have at least one group (bits is empty)")
        if len(bits) > _MAX_GROUPS:
            raise ValueError(f"a message has at most 2**32 - 1 groups, got {len(bits)}")
        if len(raw_idx) != len(bits):
            raise ValueError(f"indices has {len(raw_idx)} entries but bits has {len(bits)} (one per group)")
        indices = tuple(check_int(k, f"indices[{g}]", 0, (1 << b) - 1) for g, (k, b) in enumerate(zip(raw_idx, bits)))
        digest = self.layout_digest
        if not isinstance(digest, (bytes, bytearray, memoryview)):
            raise TypeError(f"layout_digest must be bytes, got {type(digest).__name__}")
        digest = bytes(digest)
        if len(digest) != _DIGEST_SIZE:
            raise ValueError(f"layout_digest must be {_DIGEST_SIZE} bytes, got {len(digest)}")
        object.__setattr__(self, "seed", seed)
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "layout_digest", digest)
        object.__setattr__(self, "_nbytes", _message_nbytes(bits))

    @classmethod
    def _checked(cls, seed: int, bits: tuple[int, ...], indices: tuple[int, ...], digest: bytes) -> DPRECMessage:
        """A message of values the caller has already checked (the encoder: a checked seed, its
        layout's bits and digest, each index from a Gumbel-max over ``2**bits`` candidates),
        without validating them again: on a small update that would cost a noticeable share of
        the encode."""
        msg = object.__new__(cls)
        object.__setattr__(msg, "seed", seed)
        object.__setattr__(msg, "bits", bits)
        object.__setattr__(msg, "indices", indices)
        object.__setattr__(msg, "layout_digest", digest)
        object.__setattr__(msg, "_nbytes", _message_nbytes(bits))
        return msg

    @property
    def num_groups(self) -> int:
        """Number of groups ``G``."""
        return len(self.bits)

    @property
    def total_bits(self) -> int:
        """Bits of the packed indices, ``sum_g b_g``."""
        return sum(self.bits)

    @property
    def nbytes(self) -> int:
        """Length of :meth:`to_bytes` in bytes (header, bits, indices and CRC)."""
        return self._nbytes

    def __repr__(self) -> str:
        if len(set(self.bits)) == 1:
            bits = str(self.bits[0])
        else:
            bits = "(" + ", ".join(str(b) for b in self.bits[:8]) + (", ...)" if len(self.bits) > 8 else ")")
        head = ", ".join(str(k) for k in self.indices[:8]) + (", ..." if len(self.indices) > 8 else "")
        return (
            f"DPRECMessage(seed=0x{self.seed:016x}, groups={self.num_groups}, bits={bits}, "
            f"indices=({head}), layout_digest={self.layout_digest.hex()}, nbytes={self.nbytes})"
        )

    def to_bytes(self) -> bytes:
        """Serialize to the compact versioned byte format described in :mod:`dprec.rec.codec`.

        Returns
        -------
        bytes
            ``nbytes`` bytes, ending in a CRC-32 of everything before it.
        """
        uniform = len(set(self.bits)) == 1
        flags = FLAG_UNIFORM_BITS if uniform else 0
        header = _HEADER.pack(
            MAGIC, FORMAT_VERSION, NORMAL_TRANSFORM_VERSION, flags, self.seed, self.layout_digest, len(self.bits)
        )
        bits_field = bytes([self.bits[0]]) if uniform else bytes(self.bits)
        return seal(header + bits_field + _pack_indices(self.indices, self.bits))

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, layout: Layout | None = None) -> DPRECMessage:
        """Parse bytes written by :meth:`to_bytes`.

        Parameters
        ----------
        data : bytes, bytearray or memoryview
            Exactly one message, nothing before or after it.
        layout : Layout, optional
            The layout the receiver expects (a server's own: ``codec.layout(template)``). Pass it
            for bytes from a sender you do not trust: the length, group count, layout digest and
            bits are compared with it before anything per group is done, so a message that does
            not match is refused in time independent of what its header claims. Without it, a
            well-formed message of ``n`` bytes may hold up to ``8 n`` groups, and parsing it
            takes time and memory in proportion to its group count.

        Returns
        -------
        DPRECMessage

        Raises
        ------
        TypeError
            If ``data`` is not bytes-like, or ``layout`` not a :class:`Layout`.
        ValueError
            If the bytes are truncated, have trailing bytes, a bad magic, an unsupported
            format version or flags, another normal-transform version, a CRC mismatch,
            bits outside 1..24 or non-zero padding bits; or do not match ``layout``.
        """
        data = as_bytes(data, "from_bytes")
        if layout is not None and not isinstance(layout, Layout):
            raise TypeError(f"layout must be a Layout (codec.layout(template)), got {type(layout).__name__}")
        n = len(data)
        if n < len(MAGIC):
            raise ValueError(f"DP-REC message truncated: {n} bytes, shorter than the {len(MAGIC)}-byte magic")
        if data[: len(MAGIC)] != MAGIC:
            raise ValueError(f"not a DP-REC message: bad magic {data[: len(MAGIC)]!r} (expected {MAGIC!r})")
        if n < len(MAGIC) + 1:
            raise ValueError(f"DP-REC message truncated: {n} bytes, no format version")
        version = data[len(MAGIC)]
        if version != FORMAT_VERSION:
            raise ValueError(
                f"unsupported DP-REC message format version {version} (this dprec reads version {FORMAT_VERSION})"
            )
        if layout is not None and n != layout.message_nbytes:
            raise ValueError(
                f"DP-REC message does not match the expected layout: {n} bytes, but its messages have "
                f"{layout.message_nbytes} (layout digest {layout.digest.hex()})"
            )
        min_len = _HEADER.size + 1 + CRC.size
        if n < min_len:
            raise ValueError(f"DP-REC message truncated: {n} bytes, shorter than the minimum of {min_len}")
        _, _, transform, flags, seed, digest, groups = _HEADER.unpack_from(data, 0)
        if flags & ~_KNOWN_FLAGS:
            raise ValueError(f"unsupported DP-REC message flags 0x{flags:04x} (known: 0x{_KNOWN_FLAGS:04x})")
        if groups == 0:
            raise ValueError("invalid DP-REC message: group count is 0")
        if layout is not None and (digest != layout.digest or groups != layout.num_groups):
            raise ValueError(
                f"DP-REC message does not match the expected layout: layout digest {digest.hex()} with {groups} groups, "
                f"expected {layout.digest.hex()} with {layout.num_groups} (tensor names, shapes, max_group_size, bits "
                "or sigma differ from the encoder's)"
            )
        pos = _HEADER.size
        n_bits_bytes = 1 if flags & FLAG_UNIFORM_BITS else groups
        if n < pos + n_bits_bytes + CRC.size:
            raise ValueError(
                f"DP-REC message truncated: {n} bytes, but the header announces {groups} groups "
                f"({n_bits_bytes} bits bytes)"
            )
        raw_bits = data[pos : pos + n_bits_bytes]
        if layout is not None:
            if raw_bits != layout._bits_field:
                raise ValueError("DP-REC message does not match the expected layout: its bits differ from the layout's")
        else:
            _check_bits_field(raw_bits)
        bits_array = np.frombuffer(raw_bits, dtype=np.uint8)
        total_bits = groups * raw_bits[0] if n_bits_bytes == 1 else int(bits_array.sum(dtype=np.int64))
        pos += n_bits_bytes
        expected = pos + (total_bits + 7) // 8 + CRC.size
        if n < expected:
            raise ValueError(f"DP-REC message truncated: {n} bytes, expected {expected}")
        if n > expected:
            raise ValueError(f"DP-REC message has {n - expected} trailing bytes after its {expected} bytes")
        check_crc(data, "DP-REC")
        if transform != NORMAL_TRANSFORM_VERSION:
            raise ValueError(
                f"DP-REC message uses normal-transform version {transform}, but this dprec implements "
                f"version {NORMAL_TRANSFORM_VERSION}: its candidates cannot be regenerated"
            )
        if layout is not None:
            bits = layout.bits
        else:
            bits = (raw_bits[0],) * groups if n_bits_bytes == 1 else tuple(raw_bits)
        indices = _unpack_indices(data[pos : n - CRC.size], bits_array if n_bits_bytes > 1 else None, raw_bits[0], groups)
        # Every index is below 2**bits by construction (bits of it were read): nothing left to check.
        return cls._checked(check_seed(seed), bits, indices, bytes(digest))


def _check_bits_field(raw_bits: bytes) -> None:
    """ValueError naming the first group whose bits are outside MIN_BITS..MAX_BITS (one vectorized pass)."""
    b = np.frombuffer(raw_bits, dtype=np.uint8)
    bad = np.flatnonzero((b < MIN_BITS) | (b > MAX_BITS))
    if bad.size:
        g = int(bad[0])
        where = "bits" if b.size == 1 else f"bits of group {g}"
        raise ValueError(f"invalid DP-REC message: {where} = {int(b[g])} is outside {MIN_BITS}..{MAX_BITS}")


def _as_list(x: Any) -> list:
    return x.tolist() if isinstance(x, np.ndarray) else list(x)


def _message_nbytes(bits: tuple[int, ...], uniform: bool | None = None) -> int:
    if uniform is None:
        uniform = len(set(bits)) == 1
    return _HEADER.size + (1 if uniform else len(bits)) + (sum(bits) + 7) // 8 + CRC.size


def _bit_positions(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each payload bit: its group and its position within the group's index."""
    starts = np.zeros(bits.size, dtype=np.int64)
    np.cumsum(bits[:-1], out=starts[1:])
    group_of_bit = np.repeat(np.arange(bits.size, dtype=np.int64), bits)
    pos_in_group = np.arange(group_of_bit.size, dtype=np.int64) - np.repeat(starts, bits)
    return starts, group_of_bit, pos_in_group


def _pack_indices(indices: tuple[int, ...], bits: tuple[int, ...]) -> bytes:
    b = np.asarray(bits, dtype=np.int64)
    idx = np.asarray(indices, dtype=np.uint32)
    _, group_of_bit, pos = _bit_positions(b)
    payload = ((idx[group_of_bit] >> pos.astype(np.uint32)) & 1).astype(np.uint8)
    return np.packbits(payload, bitorder="little").tobytes()


def _unpack_indices(payload: bytes, bits: np.ndarray | None, uniform_bits: int, groups: int) -> tuple[int, ...]:
    """The indices of a payload: ``groups`` indices of ``uniform_bits`` bits each (``bits`` None), or of
    ``bits[g]`` bits; ValueError for non-zero padding. Uniform bits take about 2 bytes of work memory
    per payload bit."""
    if bits is None:
        total = groups * uniform_bits
        unpacked = np.unpackbits(np.frombuffer(payload, dtype=np.uint8), bitorder="little")
        if unpacked[total:].any():
            raise ValueError("invalid DP-REC message: the padding bits after the last index are not zero")
        if uniform_bits == 1:
            return tuple(unpacked[:total].tolist())
        weights = np.left_shift(np.uint32(1), np.arange(uniform_bits, dtype=np.uint32))
        return tuple((unpacked[:total].reshape(groups, uniform_bits) @ weights).tolist())
    b = bits.astype(np.int64)
    total = int(b.sum())
    unpacked = np.unpackbits(np.frombuffer(payload, dtype=np.uint8), bitorder="little")
    if unpacked[total:].any():
        raise ValueError("invalid DP-REC message: the padding bits after the last index are not zero")
    starts, _, pos = _bit_positions(b)
    vals = unpacked[:total].astype(np.uint32) << pos.astype(np.uint32)
    return tuple(np.add.reduceat(vals, starts).tolist())


# --------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutGroup:
    """One group of a :class:`Layout`.

    Attributes
    ----------
    group : int
        Group id ``g`` (the Philox counter word), ``0 .. G-1``.
    name : str
        Name of the tensor the group belongs to.
    tensor : int
        Position of that tensor in canonical order.
    start : int
        Offset of the group's first element in the flattened (C-order) tensor.
    size : int
        Elements in the group.
    bits : int
        Bits of the group's index; ``2**bits`` candidates.
    """

    group: int
    name: str
    tensor: int
    start: int
    size: int
    bits: int


@dataclass(frozen=True)
class Layout:
    """How a codec splits an update with given names and shapes into groups.

    Returned by :meth:`DPRECCodec.layout`; the encoder and decoder must agree on it,
    which the message's :attr:`digest` checks.

    Attributes
    ----------
    names : tuple of str
        Tensor names in canonical order (sorted mapping keys, sequence indices as
        strings, ``""`` for a single array).
    shapes : tuple of tuple of int
        Their shapes.
    groups : tuple of LayoutGroup
        Every group in group-id order.
    sigma : float
        The codec's sigma.
    digest : bytes
        8-byte BLAKE2b digest of all of the above (see :mod:`dprec.rec.codec`).
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    groups: tuple[LayoutGroup, ...]
    sigma: float
    digest: bytes

    @property
    def num_tensors(self) -> int:
        """Number of tensors."""
        return len(self.names)

    @property
    def num_groups(self) -> int:
        """Number of groups ``G``."""
        return len(self.groups)

    @property
    def num_elements(self) -> int:
        """Elements over all tensors."""
        return sum(g.size for g in self.groups)

    @functools.cached_property
    def bits(self) -> tuple[int, ...]:
        """Bits of every group, in group order."""
        return tuple(g.bits for g in self.groups)

    @functools.cached_property
    def _bits_field(self) -> bytes:
        """The bits field of this layout's messages (one byte when every group has the same bits)."""
        bits = self.bits
        return bytes(bits[:1]) if len(set(bits)) == 1 else bytes(bits)

    @property
    def total_bits(self) -> int:
        """Bits of all indices together, ``sum_g b_g`` (the data-dependent payload)."""
        return sum(g.bits for g in self.groups)

    @functools.cached_property
    def message_nbytes(self) -> int:
        """Size in bytes of a serialized message for this layout."""
        return _message_nbytes(self.bits)

    def describe(self) -> str:
        """A human-readable table of the groups."""
        rows = [f"{'group':>6}  {'tensor':<30} {'start':>12} {'size':>12} {'bits':>4}"]
        for g in self.groups:
            rows.append(f"{g.group:>6}  {g.name!r:<30} {g.start:>12} {g.size:>12} {g.bits:>4}")
        rows.append(
            f"{self.num_groups} groups, {self.num_elements} elements, {self.total_bits} index bits, "
            f"{self.message_nbytes} bytes per message, digest {self.digest.hex()}"
        )
        return "\n".join(rows)


def _layout_digest(
    names: tuple[str, ...], shapes: tuple[tuple[int, ...], ...], groups: list[LayoutGroup], sigma: float
) -> bytes:
    h = hashlib.blake2b(digest_size=_DIGEST_SIZE, person=b"dprec.rec.layout")
    h.update(struct.pack("<BI", FORMAT_VERSION, len(names)))
    hash_tensors(h, names, shapes)
    h.update(struct.pack("<Q", len(groups)))
    for g in groups:
        h.update(struct.pack("<IQQB", g.tensor, g.start, g.size, g.bits))
    h.update(struct.pack("<d", sigma))
    return h.digest()
