"""DP-REC codec for whole model updates (SPEC §3).

A client compresses its model update ``phi = w_client - w_server`` (all tensors
together) into a 64-bit seed plus ``b_g`` bits per group; the server regenerates only
the chosen candidate of each group and can aggregate many clients in one pass::

    from dprec.codec import DPRECCodec, DPRECMessage

    codec = DPRECCodec(sigma=0.01, clip_multiplier=1.0, bits=7)
    msg = codec.encode(update)                  # client
    blob = msg.to_bytes()                       # ~33 bytes + 7 bits per group
    msg = DPRECMessage.from_bytes(blob)         # server
    delta = codec.decode(msg, template)         # one client's decoded update
    mean = codec.aggregate(msgs, template)      # mean of many clients' updates

Update and template
-------------------
An update (and a template, which only supplies names, shapes and array types) is one of

* a single array (NumPy, PyTorch on the CPU or a GPU, CuPy, ...): one tensor named ``""``;
* a ``Mapping[str, array]`` such as a PyTorch ``state_dict``: one tensor per key;
* a ``list`` or ``tuple`` of arrays: tensors named ``"0"``, ``"1"``, ...

Every tensor must be floating point: float16 and bfloat16 are converted to float32,
float32 and float64 are used as they are; integer, boolean and complex tensors are
rejected (TypeError naming the tensor, e.g. ``update['fc.weight']``), so drop integer
buffers such as ``num_batches_tracked`` from a ``state_dict`` first. Non-contiguous
host inputs are copied. PyTorch is imported only when a tensor is seen.

GPU tensors
-----------
An update on a GPU (PyTorch CUDA tensors, CuPy arrays, or any ``__cuda_array_interface__``
/ ``__dlpack__`` producer; all on one device) is encoded there: the global norm, every
group's logits and one batched Gumbel-max run on the device, on the caller's current
stream, and the host waits only for the norm and the indices. Non-contiguous GPU tensors
are rejected. A template on a GPU decodes and aggregates there, into arrays of the
template's framework on its device; the values are bit-identical to the CPU's. Mixing the
host and a GPU within one update or template raises ValueError.

Canonical order and groups
--------------------------
Tensors are put in *canonical order*: mapping keys sorted by name (Python string order,
i.e. by Unicode code point, whatever the mapping's insertion order); sequences in index
order. Each tensor is flattened in C (row-major) order and forms one group; with
``max_group_size=m`` a tensor of more than ``m`` elements is split into consecutive
chunks of ``m`` elements (the last one may be shorter). Groups are numbered ``0 .. G-1``
in canonical order of their tensors, then chunk order; the group id is the Philox
counter word ``g`` of the group's candidates. :meth:`DPRECCodec.layout` returns this
:class:`Layout` for a template.

Encoding (client)
-----------------
1. Global L2 clip: the norm of all tensors together is computed in float64 and the
   update is scaled by ``min(1, C / norm)`` (1 when the norm is 0), ``C =
   clip_multiplier * sigma``. The scale is folded into the logits; nothing is copied.
2. The 64-bit seed comes from the OS entropy source. ``seed=`` exists only for tests and
   reproducibility: a seed reused across clients or rounds correlates their candidates.
3. Group ``g`` gets ``K_g = 2**b_g`` candidates ``sigma * z_{g,k}`` and the index
   ``k*_g`` is drawn from ``softmax(<z_{g,k}, phi_hat_g> / sigma)`` by Gumbel-max with
   *private* randomness: ``rng`` if given, otherwise a Generator seeded from the OS
   entropy source. It is never derived from the seed.

Decoding (server)
-----------------
Group ``g`` decodes to ``float32(sigma) * z_{g,k*_g}`` (only that candidate is
generated), reassembled into the template's names and shapes as float32 NumPy arrays,
or float32 CPU tensors where the template holds PyTorch tensors, or float32 arrays of the
template's framework on its GPU. Decoding is bit identical between backends.

Clipping diagnostics
--------------------
``codec.encode(update, return_info=True)`` returns ``(message, info)`` with an
:class:`EncodeInfo`: the update's global L2 norm before clipping, ``C``, whether it was
clipped and the scale applied. It stays on the client (nothing of it is in the message;
the norm is private data); see :meth:`DPRECCodec.encode` for tuning ``sigma`` with it.

Privacy accounting
------------------
The guarantee depends on ``clip_multiplier`` ``c``, on the run (rounds ``T``, clients per round
``B``, clients ``N``, how clients are sampled, delta) and, through the importance-sampling
overhead ``12 rho / 2^b`` of Algorithm 7, on ``b``, the TOTAL bits of one message (bits per
group times the number of groups, :attr:`Layout.total_bits`), not on ``sigma``.
:meth:`DPRECCodec.epsilon`, :meth:`DPRECCodec.local_epsilon` and :meth:`DPRECCodec.accountant`
(a round-by-round :class:`dprec.accounting.DPRECRoundAccountant`) take ``b`` from the layout of a
template and apply the **bit-width rule**: with ``rho = T B exp(c^2)``, an overhead
``12 rho / 2^b >= delta`` is a ValueError naming ``bits`` (epsilon is undefined), giving the
message's ``G`` groups x bits and the smallest uniform bits per group that brings the overhead
to at most 10% of delta (:func:`dprec.accounting.dprec_min_bits`); an overhead above 10% of
delta warns :class:`dprec.accounting.DPRECPrivacyWarning`. These methods import
:mod:`dprec.accounting` (SciPy) when called.

Byte format (version 1)
-----------------------
:meth:`DPRECMessage.to_bytes` writes, little-endian:

==========  ==============  ==========================================================
offset      size (bytes)    field
==========  ==============  ==========================================================
0           4               magic ``b"DPRC"``
4           1               format version (1)
5           1               normal-transform version (``constants.NORMAL_TRANSFORM_VERSION``)
6           2               flags, uint16: bit 0 ``UNIFORM_BITS`` (every group has the same
                            bits); bits 1-15 reserved, must be 0
8           8               seed, uint64
16          8               layout digest (see :attr:`Layout.digest`)
24          4               group count ``G``, uint32, ``>= 1``
28          1 or ``G``      bits per group, uint8 each in 1..24: one byte if
                            ``UNIFORM_BITS``, else one per group in group order
28 + B      ``ceil(S/8)``   indices (``B`` = 1 or ``G``, the length of the bits field):
                            ``S = sum_g b_g`` bits; index ``k*_g`` occupies ``b_g``
                            bits, least significant bit first, groups in order, packed
                            from the least significant bit of each byte; the padding
                            bits of the last byte are 0
end - 4     4               CRC-32 (``zlib.crc32``, IEEE) of every preceding byte, uint32
==========  ==============  ==========================================================

So a message is ``33 + ceil(S/8)`` bytes with uniform bits (``32 + G + ceil(S/8)``
otherwise). A reader rejects unknown format versions and flags, so later features
(entropy-coded indices, history compression) get a new flag or version.
:meth:`DPRECMessage.from_bytes` raises ValueError naming the problem for truncated
input, trailing bytes, a bad magic, an unsupported format version or flag, a
normal-transform version other than this build's, a CRC mismatch (corruption), bits out
of range and non-zero padding; and TypeError for an object that is not bytes-like.

The layout digest is BLAKE2b with an 8-byte digest size (``person=b"dprec.rec.layout"``) over
the format version, the tensor names (UTF-8) and shapes in canonical order, every
group's tensor, offset, size and bits, and ``sigma`` (float64): decoding or aggregating
with a template or codec whose names, shapes, group split, bits or sigma differ from
the encoder's raises ValueError. ``clip_multiplier`` and the backend do not enter it.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from . import _backend, _device, rec
from ._validation import (
    check_bits,
    check_int,
    check_positive,
    check_seed,
    float_array,
    is_torch_tensor,
    os_seed,
    private_rng,
)
from .constants import DEFAULT_BITS, MAX_BITS, MAX_STREAM_ELEMENTS, MIN_BITS, NORMAL_TRANSFORM_VERSION

if TYPE_CHECKING:  # dprec.accounting needs SciPy: imported lazily by the accounting methods
    from .accounting import DPRECAccounting, DPRECRoundAccountant

__all__ = [
    "DPRECCodec",
    "DPRECMessage",
    "EncodeInfo",
    "Layout",
    "LayoutGroup",
    "DEFAULT_BITS",
    "FORMAT_VERSION",
    "MAGIC",
    "FLAG_UNIFORM_BITS",
]

#: First bytes of every serialized message.
MAGIC = b"DPRC"
#: Version of the byte format written by :meth:`DPRECMessage.to_bytes`.
FORMAT_VERSION = 1
#: Flag: every group has the same bits (stored once).
FLAG_UNIFORM_BITS = 0x0001
_KNOWN_FLAGS = FLAG_UNIFORM_BITS

_HEADER = struct.Struct("<4sBBHQ8sI")  # magic, version, transform, flags, seed, digest, G
_CRC = struct.Struct("<I")
_DIGEST_SIZE = 8
_MAX_GROUPS = 0xFFFFFFFF
# Elements per float64 chunk when computing norms (bounded temporary memory).
_NORM_CHUNK = 1 << 16
# Above this norm a float64 update is scaled before the logits so that no dot product overflows.
_PRESCALE_NORM = 1e200
# Below this sum of squares float64 squares may have underflowed; the norm is recomputed rescaled.
_TINY_SUMSQ = 2.0**-800

BitsSpec = Union[int, Mapping]


# --------------------------------------------------------------------------------------
# Message
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncodeInfo:
    """Client-side clipping diagnostics of one :meth:`DPRECCodec.encode` call.

    Returned by ``encode(..., return_info=True)``. Nothing of it goes on the wire: the norm
    is a function of the client's private update, so keep it on the client (or release it
    only through a mechanism with its own privacy guarantee).

    Attributes
    ----------
    norm : float
        Global L2 norm of the update before clipping (all tensors together, float64).
    clip_norm : float
        The clipping bound ``C = clip_multiplier * sigma``.
    clipped : bool
        ``norm > clip_norm``: the update was scaled down.
    scale : float
        The factor applied, ``min(1, C / norm)`` (1.0 when the norm is 0).
    """

    norm: float
    clip_norm: float
    clipped: bool
    scale: float


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
        """Serialize to the compact versioned byte format described in :mod:`dprec.codec`.

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
        body = header + bits_field + _pack_indices(self.indices, self.bits)
        return body + _CRC.pack(zlib.crc32(body) & 0xFFFFFFFF)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> DPRECMessage:
        """Parse bytes written by :meth:`to_bytes`.

        Parameters
        ----------
        data : bytes, bytearray or memoryview
            Exactly one message, nothing before or after it.

        Returns
        -------
        DPRECMessage

        Raises
        ------
        TypeError
            If ``data`` is not bytes-like.
        ValueError
            If the bytes are truncated, have trailing bytes, a bad magic, an unsupported
            format version or flags, another normal-transform version, a CRC mismatch,
            bits outside 1..24 or non-zero padding bits.
        """
        if isinstance(data, memoryview):
            data = data.tobytes()
        elif isinstance(data, bytearray):
            data = bytes(data)
        elif not isinstance(data, bytes):
            raise TypeError(f"from_bytes expects bytes, bytearray or memoryview, got {type(data).__name__}")
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
        min_len = _HEADER.size + 1 + _CRC.size
        if n < min_len:
            raise ValueError(f"DP-REC message truncated: {n} bytes, shorter than the minimum of {min_len}")
        _, _, transform, flags, seed, digest, groups = _HEADER.unpack_from(data, 0)
        if flags & ~_KNOWN_FLAGS:
            raise ValueError(f"unsupported DP-REC message flags 0x{flags:04x} (known: 0x{_KNOWN_FLAGS:04x})")
        if groups == 0:
            raise ValueError("invalid DP-REC message: group count is 0")
        pos = _HEADER.size
        n_bits_bytes = 1 if flags & FLAG_UNIFORM_BITS else groups
        if n < pos + n_bits_bytes + _CRC.size:
            raise ValueError(
                f"DP-REC message truncated: {n} bytes, but the header announces {groups} groups "
                f"({n_bits_bytes} bits bytes)"
            )
        raw_bits = data[pos : pos + n_bits_bytes]
        for g, b in enumerate(raw_bits):
            if not MIN_BITS <= b <= MAX_BITS:
                where = "bits" if n_bits_bytes == 1 else f"bits of group {g}"
                raise ValueError(f"invalid DP-REC message: {where} = {b} is outside {MIN_BITS}..{MAX_BITS}")
        total_bits = groups * raw_bits[0] if n_bits_bytes == 1 else sum(raw_bits)
        pos += n_bits_bytes
        expected = pos + (total_bits + 7) // 8 + _CRC.size
        if n < expected:
            raise ValueError(f"DP-REC message truncated: {n} bytes, expected {expected}")
        if n > expected:
            raise ValueError(f"DP-REC message has {n - expected} trailing bytes after its {expected} bytes")
        (crc,) = _CRC.unpack_from(data, n - _CRC.size)
        actual = zlib.crc32(data[: n - _CRC.size]) & 0xFFFFFFFF
        if crc != actual:
            raise ValueError(f"DP-REC message corrupted: CRC-32 mismatch (stored 0x{crc:08x}, computed 0x{actual:08x})")
        if transform != NORMAL_TRANSFORM_VERSION:
            raise ValueError(
                f"DP-REC message uses normal-transform version {transform}, but this dprec implements "
                f"version {NORMAL_TRANSFORM_VERSION}: its candidates cannot be regenerated"
            )
        bits = (raw_bits[0],) * groups if n_bits_bytes == 1 else tuple(raw_bits)
        indices = _unpack_indices(data[pos : n - _CRC.size], bits)
        return cls(seed=seed, bits=bits, indices=indices, layout_digest=digest)


def _as_list(x: Any) -> list:
    return x.tolist() if isinstance(x, np.ndarray) else list(x)


def _message_nbytes(bits: tuple[int, ...], uniform: bool | None = None) -> int:
    if uniform is None:
        uniform = len(set(bits)) == 1
    return _HEADER.size + (1 if uniform else len(bits)) + (sum(bits) + 7) // 8 + _CRC.size


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


def _unpack_indices(payload: bytes, bits: tuple[int, ...]) -> tuple[int, ...]:
    b = np.asarray(bits, dtype=np.int64)
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
        8-byte BLAKE2b digest of all of the above (see :mod:`dprec.codec`).
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

    @property
    def bits(self) -> tuple[int, ...]:
        """Bits of every group, in group order."""
        return tuple(g.bits for g in self.groups)

    @property
    def total_bits(self) -> int:
        """Bits of all indices together, ``sum_g b_g`` (the data-dependent payload)."""
        return sum(g.bits for g in self.groups)

    @property
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
    for name, shape in zip(names, shapes):
        raw = name.encode("utf-8", "surrogatepass")
        h.update(struct.pack("<Q", len(raw)) + raw)
        h.update(struct.pack(f"<I{len(shape)}Q", len(shape), *shape))
    h.update(struct.pack("<Q", len(groups)))
    for g in groups:
        h.update(struct.pack("<IQQB", g.tensor, g.start, g.size, g.bits))
    h.update(struct.pack("<d", sigma))
    return h.digest()


# --------------------------------------------------------------------------------------
# Update / template containers
# --------------------------------------------------------------------------------------


@dataclass
class _Tree:
    """A flattened update or template: leaves in canonical order."""

    kind: str  # "single", "mapping" or "sequence"
    container: Any  # type to rebuild (dict, OrderedDict, list, tuple) or None
    keys: list  # mapping: keys in the container's own iteration order
    names: tuple[str, ...]  # canonical order
    labels: list[str]  # canonical order: how errors name each tensor
    leaves: list  # canonical order: the original objects


def _flatten(obj: Any, what: str) -> _Tree:
    if isinstance(obj, Mapping):
        keys = list(obj.keys())
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"{what} keys must be str, got {type(k).__name__} ({k!r})")
        if not keys:
            raise ValueError(f"{what} is empty (no tensors)")
        names = tuple(sorted(keys))
        leaves = [obj[k] for k in names]
        container = OrderedDict if isinstance(obj, OrderedDict) else dict
        tree = _Tree("mapping", container, keys, names, [f"{what}[{k!r}]" for k in names], leaves)
    elif isinstance(obj, (list, tuple)):
        if not obj:
            raise ValueError(f"{what} is empty (no tensors)")
        n = len(obj)
        tree = _Tree(
            "sequence",
            tuple if isinstance(obj, tuple) else list,
            [],
            tuple(str(i) for i in range(n)),
            [f"{what}[{i}]" for i in range(n)],
            list(obj),
        )
    else:
        tree = _Tree("single", None, [], ("",), [what], [obj])
    for label, leaf in zip(tree.labels, tree.leaves):
        if isinstance(leaf, (Mapping, list, tuple)):
            raise TypeError(
                f"{label} is a {type(leaf).__name__}; nested containers are not supported "
                "(pass a flat mapping of name -> array)"
            )
        if leaf is None or isinstance(leaf, (str, bytes)):
            raise TypeError(f"{label} must be an array or tensor, got {type(leaf).__name__}")
    return tree


def _check_float_dtype(dtype: Any, label: str) -> None:
    name = getattr(dtype, "name", str(dtype))
    if name == "bfloat16":
        return
    kind = getattr(dtype, "kind", "")
    if kind != "f":
        what = {"b": "boolean", "i": "integer", "u": "integer", "c": "complex"}.get(kind, str(dtype))
        raise TypeError(
            f"{label} must be a floating-point array (float16, bfloat16, float32 or float64), got {what} dtype {dtype}"
        )


def _template_info(tree: _Tree) -> tuple[list[tuple[int, ...]], list[bool], str | None]:
    """Shapes and torch-ness of the leaves, and the device they share (None: the host).

    Checks device, dtype and emptiness (not values). All leaves must live on the host or
    all on the same GPU.
    """
    shapes, torch_flags, places = [], [], []
    for label, leaf in zip(tree.labels, tree.leaves):
        where = _device.device_of(leaf)
        if where is not None:
            g = _device.gpu_array(leaf, label)  # ValueError when CUDA is unusable or the leaf is strided
            if g is None:
                raise ValueError(f"{label} is on device '{where}', which dprec does not support (CPU or CUDA only)")
            if g.dtype not in ("float16", "bfloat16", "float32", "float64"):
                kind = "integer" if "int" in g.dtype else "boolean" if g.dtype == "bool" else g.dtype
                raise TypeError(
                    f"{label} must be a floating-point array (float16, bfloat16, float32 or float64), "
                    f"got {kind} dtype {g.dtype}"
                )
            shape = g.shape
            torch_flags.append(False)
            places.append((label, g.label))
        elif is_torch_tensor(leaf):
            if not leaf.is_floating_point():
                kind = "complex" if leaf.is_complex() else "boolean" if str(leaf.dtype) == "torch.bool" else "integer"
                raise TypeError(
                    f"{label} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
                    f"got {kind} dtype {leaf.dtype}"
                )
            shape = tuple(int(s) for s in leaf.shape)
            torch_flags.append(True)
            places.append((label, "cpu"))
        else:
            a = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
            _check_float_dtype(a.dtype, label)
            shape = tuple(int(s) for s in a.shape)
            torch_flags.append(False)
            places.append((label, "cpu"))
        if math.prod(shape) == 0:
            raise ValueError(f"{label} must not be empty (shape {shape})")
        shapes.append(shape)
    for label, where in places[1:]:
        if where != places[0][1]:
            raise ValueError(
                f"{label} is on {where} but {places[0][0]} is on {places[0][1]}; "
                "all tensors of one update must be on the same device"
            )
    device = places[0][1] if places and places[0][1] != "cpu" else None
    return shapes, torch_flags, device


def _sumsq(a: np.ndarray, divisor: float = 1.0) -> float:
    """Sum of ``(a / divisor)**2`` in float64, in fixed chunks.

    NumPy's pairwise summation (not BLAS, whose order may depend on its thread count)
    keeps the result deterministic; the chunks bound the temporary memory. The division
    is done in float64, as on the GPU (a float32 divisor could round to 0 or overflow).
    """
    flat = a.reshape(-1)
    total = 0.0
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for i in range(0, flat.size, _NORM_CHUNK):
            c = flat[i : i + _NORM_CHUNK].astype(np.float64, copy=False)
            if divisor != 1.0:
                c = c / divisor
            total += float(np.add.reduce(c * c))
    return total


def _global_norm(arrays: list[np.ndarray], labels: list[str]) -> float:
    """The L2 norm of all arrays together (float64); ValueError naming a non-finite tensor."""
    sums = [_sumsq(a) for a in arrays]
    for s, a, label in zip(sums, arrays, labels):
        if not math.isfinite(s) and not np.isfinite(a).all():
            bad = "NaN" if np.isnan(a).any() else "infinite"
            raise ValueError(f"{label} contains {bad} values")
    total = math.fsum(sums)
    if math.isfinite(total) and (total > _TINY_SUMSQ or all(not a.any() for a in arrays)):
        return math.sqrt(total)
    # Overflow or (partial) underflow of the plain sum of squares (extreme float64 values): rescale.
    m = max(float(np.max(np.abs(a))) for a in arrays)
    if m == 0.0:
        return 0.0
    total = math.fsum(_sumsq(a, m) for a in arrays)
    return m * math.sqrt(total)


def _gpu_global_norm(gs: list[_device.GpuArray], labels: list[str]) -> float:
    """:func:`_global_norm` on the device: one float64 pass per tensor (and a second,
    divided by max |x|, only when the plain sum of squares over- or underflows)."""
    cuda = _backend.cuda_module()
    first = gs[0]

    def norm_stats(divisor: float) -> list[tuple[float, float]]:
        # One host wait for every tensor, on the first tensor's stream.
        r = cuda.norm_stats(first.device, first.stream, [g.ptr for g in gs], [g.dtype for g in gs],
                            [g.size for g in gs], divisor, scratch=first.scratch)
        return [(float(a), float(b)) for a, b in r]

    stats = norm_stats(1.0)
    for (_, m), label in zip(stats, labels):
        if not math.isfinite(m):
            raise ValueError(f"{label} contains {'NaN' if math.isnan(m) else 'infinite'} values")
    total = math.fsum(s for s, _ in stats)
    if math.isfinite(total) and (total > _TINY_SUMSQ or all(m == 0.0 for _, m in stats)):
        return math.sqrt(total)
    m = max(m for _, m in stats)
    if m == 0.0:
        return 0.0
    total = math.fsum(s for s, _ in norm_stats(m))
    return m * math.sqrt(total)


# --------------------------------------------------------------------------------------
# Codec
# --------------------------------------------------------------------------------------


class DPRECCodec:
    """DP-REC compression of whole model updates (SPEC §3).

    Parameters
    ----------
    sigma : float
        Standard deviation of the Gaussian prior and of the candidates: a real number in
        [:data:`dprec.rec.MIN_SIGMA`, :data:`dprec.rec.MAX_SIGMA`] (about 1.18e-38 .. 5.78e37),
        i.e. ``float32(sigma)`` is a normal float32 and ``float32(sigma) * z`` is finite for
        the largest standard normal the transform produces (:data:`dprec.rec.MAX_ABS_NORMAL`
        = 5.88705), so decoded updates are always finite and never flushed to zero.
    clip_multiplier : float
        ``c`` in the clipping bound ``C = c * sigma`` on the global L2 norm, ``> 0``; ``C``
        must be finite.
    bits : int or Mapping[str, int]
        Bits per group (``K = 2**bits`` candidates), 1..24: one int for every group, or a
        mapping from tensor name to bits (tensors not in it get :data:`DEFAULT_BITS` = 7;
        all chunks of a split tensor share its bits). Every name in the mapping must be a
        tensor of the update.
    max_group_size : int, optional
        Split tensors of more than this many elements into consecutive chunks of this
        size (``>= 1``). ``None`` (default): one group per tensor.
    backend : {"auto", "cpu", "cuda", "reference"}
        Kernel backend. "auto" (default) follows the data: GPU updates and templates run on
        CUDA, host ones on the CPU. Every backend decodes bit-identically.

    Notes
    -----
    Privacy: :meth:`epsilon`, :meth:`local_epsilon` and :meth:`accountant` account a run with
    this codec (DP-REC Algorithm 7 for clients sampled with replacement, by Poisson sampling or
    without replacement), taking the TOTAL bits of one message from :meth:`layout` and applying
    the bit-width rule: ``12 rho / 2^b >= delta`` (``rho = rounds * clients_per_round *
    exp(c^2)``) raises ValueError naming ``bits`` with the groups x bits of the message and the
    smallest bits per group that brings the overhead to at most 10% of delta; above 10% of delta
    :class:`dprec.accounting.DPRECPrivacyWarning` is issued. ``encode(..., return_info=True)``
    reports the clipping (:class:`EncodeInfo`), to tune ``sigma`` at a fixed ``c``.

    Raises
    ------
    ValueError
        For a parameter out of range (named in the message) or an unavailable backend.
    TypeError
        For a parameter of the wrong type.
    """

    def __init__(
        self,
        sigma: float,
        clip_multiplier: float = 1.0,
        bits: BitsSpec = DEFAULT_BITS,
        max_group_size: int | None = None,
        backend: str = "auto",
    ) -> None:
        self._sigma = rec._check_sigma(sigma, "sigma")
        self._clip_multiplier = check_positive(clip_multiplier, "clip_multiplier")
        if not math.isfinite(self._clip_multiplier * self._sigma):
            raise ValueError(
                f"clip_multiplier * sigma (the clipping bound) must be finite, got {clip_multiplier!r} * {sigma!r}"
            )
        if isinstance(bits, Mapping):
            checked = {}
            for k, v in bits.items():
                if not isinstance(k, str):
                    raise TypeError(f"bits keys must be tensor names (str), got {type(k).__name__} ({k!r})")
                checked[k] = check_bits(v, f"bits[{k!r}]")
            self._bits: int | dict[str, int] = checked
        else:
            self._bits = check_bits(bits, "bits")
        if max_group_size is not None:
            max_group_size = check_int(max_group_size, "max_group_size", 1, sys.maxsize)
        self._max_group_size = max_group_size
        _backend.check_backend(backend)
        self._backend = backend

    # -- read-only parameters ------------------------------------------------------------

    @property
    def sigma(self) -> float:
        """Prior / candidate standard deviation."""
        return self._sigma

    @property
    def clip_multiplier(self) -> float:
        """``c`` in ``C = c * sigma``."""
        return self._clip_multiplier

    @property
    def clip_norm(self) -> float:
        """The clipping bound ``C = clip_multiplier * sigma`` on the global L2 norm."""
        return self._clip_multiplier * self._sigma

    @property
    def bits(self) -> int | dict[str, int]:
        """Bits per group: an int, or a copy of the name -> bits mapping."""
        return dict(self._bits) if isinstance(self._bits, dict) else self._bits

    @property
    def max_group_size(self) -> int | None:
        """Largest group, or None for one group per tensor."""
        return self._max_group_size

    @property
    def backend(self) -> str:
        """The backend argument."""
        return self._backend

    def __repr__(self) -> str:
        return (
            f"DPRECCodec(sigma={self._sigma!r}, clip_multiplier={self._clip_multiplier!r}, bits={self._bits!r}, "
            f"max_group_size={self._max_group_size!r}, backend={self._backend!r})"
        )

    # -- layout ---------------------------------------------------------------------------

    def _bits_for(self, name: str) -> int:
        if isinstance(self._bits, dict):
            return self._bits.get(name, DEFAULT_BITS)
        return self._bits

    def _make_layout(self, names: tuple[str, ...], shapes: list[tuple[int, ...]], labels: list[str]) -> Layout:
        if isinstance(self._bits, dict):
            unknown = sorted(set(self._bits) - set(names))
            if unknown:
                raise ValueError(
                    f"bits names tensors that are not in the update/template: {unknown} (tensors: {list(names)})"
                )
        groups: list[LayoutGroup] = []
        for t, (name, shape, label) in enumerate(zip(names, shapes, labels)):
            size = math.prod(shape)
            chunk = size if self._max_group_size is None else min(size, self._max_group_size)
            if chunk > MAX_STREAM_ELEMENTS:
                raise ValueError(
                    f"{label} has {size} elements, more than one group can hold (2**34); "
                    "pass max_group_size to split it"
                )
            b = self._bits_for(name)
            for start in range(0, size, chunk):
                groups.append(LayoutGroup(len(groups), name, t, start, min(chunk, size - start), b))
            if len(groups) > _MAX_GROUPS:
                raise ValueError("the update would have more than 2**32 - 1 groups; increase max_group_size")
        shapes_t = tuple(tuple(s) for s in shapes)
        digest = _layout_digest(names, shapes_t, groups, self._sigma)
        return Layout(names=names, shapes=shapes_t, groups=tuple(groups), sigma=self._sigma, digest=digest)

    def layout(self, template: Any) -> Layout:
        """The group layout this codec uses for updates shaped like ``template``.

        Parameters
        ----------
        template : array, tensor, Mapping[str, array] or sequence of arrays
            Supplies names and shapes only (values are not read).

        Returns
        -------
        Layout
        """
        tree = _flatten(template, "template")
        shapes, _, _ = _template_info(tree)
        return self._make_layout(tree.names, shapes, tree.labels)

    # -- client ---------------------------------------------------------------------------

    def encode(
        self,
        update: Any,
        rng: np.random.Generator | None = None,
        seed: int | None = None,
        *,
        return_info: bool = False,
    ) -> DPRECMessage | tuple[DPRECMessage, EncodeInfo]:
        """Compress a model update.

        Parameters
        ----------
        update : array, tensor, Mapping[str, array] or sequence of arrays
            The update ``phi = w_client - w_server``; see the module docstring for the
            accepted containers, dtypes and canonical order.
        rng : numpy.random.Generator, optional
            Private randomness for the Gumbel-max draw. Default: a Generator seeded from
            the OS entropy source. It is never derived from the seed.
        seed : int, optional
            The 64-bit candidate seed. Default: fresh from the OS entropy source. Pass it
            only for tests and reproducibility.
        return_info : bool
            Also return the clipping diagnostics (:class:`EncodeInfo`). The message is the
            same either way (same bytes for the same ``seed`` and ``rng``).

        Returns
        -------
        DPRECMessage, or (DPRECMessage, EncodeInfo) with ``return_info=True``

        Notes
        -----
        Tuning ``sigma`` and ``c`` with :class:`EncodeInfo`. The privacy guarantee depends on
        ``c = clip_multiplier`` (and the run: rounds, clients, sampling, delta, total bits), not
        on ``sigma``: fix ``c`` for the target epsilon first (e.g. with
        :func:`dprec.accounting.dprec_calibrate`). ``sigma`` then sets both the clipping bound
        ``C = c * sigma`` and the noise of every decoded update (per coordinate ``sigma``), so
        it trades clipping bias against noise:

        * if most clients report ``clipped=True`` with a small ``scale``, ``C`` is small
          relative to the update norms: updates are shrunk (biased towards 0). Raise ``sigma``
          (noisier, same epsilon), or make updates smaller (learning rate, local epochs);
        * if ``norm`` is far below ``clip_norm`` for almost every client, ``sigma`` is larger
          than needed: lower it (less noise at the same epsilon) until a moderate share of
          clients clips, e.g. the median norm near ``C``.

        Norms are private data: look at them in a tuning run on proxy data, or collect them
        only through a private mechanism (e.g. a DP quantile estimate), never in the clear
        from real clients.

        Raises
        ------
        TypeError
            For non-floating-point tensors or bad container keys (naming the tensor), or a
            non-bool ``return_info``.
        ValueError
            For NaN/inf or empty tensors, an empty update, tensors on different devices or
            non-contiguous GPU tensors (naming the tensor), or ``bits`` naming tensors that
            the update lacks.
        """
        if not isinstance(return_info, (bool, np.bool_)):
            raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
        tree = _flatten(update, "update")
        shapes, _, device = _template_info(tree)  # device, dtype and emptiness checks; the true shapes
        layout = self._make_layout(tree.names, shapes, tree.labels)
        if _backend.resolve(self._backend, device, "update") == "cuda":
            msg, info = self._encode_gpu(tree, layout, rng, seed)
            return (msg, info) if return_info else msg
        # C-contiguous float32/float64 (float16/bfloat16 converted, non-contiguous copied).
        arrays = [float_array(leaf, label, check_finite=False) for leaf, label in zip(tree.leaves, tree.labels)]
        norm = _global_norm(arrays, tree.labels)
        info = self._clip_info(norm)
        scale = info.scale
        seed = os_seed() if seed is None else check_seed(seed)
        gen = private_rng(rng)
        flats = [a.reshape(-1) for a in arrays]
        scales = [scale] * len(flats)
        if scale < 1.0 and norm > _PRESCALE_NORM:
            # Extreme float64 values: scale those tensors first so that no dot product
            # overflows. float32 ones cannot overflow, and scaling them in float32 would
            # flush them to zero: they keep the factor in their logits.
            for i, f in enumerate(flats):
                if f.dtype == np.float64:
                    flats[i], scales[i] = f * scale, 1.0
        indices = []
        for g in layout.groups:
            phi = flats[g.tensor][g.start : g.start + g.size]
            # The update was converted and checked (finite, non-empty) as a whole above.
            lg = rec._logits_validated(phi, seed, g.group, g.bits, self._sigma, scales[g.tensor], self._backend)
            indices.append(rec.sample_index(lg, rng=gen, backend=self._backend))
        msg = DPRECMessage(seed=seed, bits=layout.bits, indices=tuple(indices), layout_digest=layout.digest)
        return (msg, info) if return_info else msg

    def _clip_info(self, norm: float) -> EncodeInfo:
        """The clipping of an update of global L2 norm ``norm`` (shared by the CPU and GPU paths)."""
        clip = self.clip_norm
        clipped = norm > clip
        scale = clip / norm if clipped else 1.0
        return EncodeInfo(norm=float(norm), clip_norm=clip, clipped=bool(clipped), scale=scale)

    def _encode_gpu(
        self, tree: _Tree, layout: Layout, rng: np.random.Generator | None, seed: int | None
    ) -> tuple[DPRECMessage, EncodeInfo]:
        """:meth:`encode` for an update on a GPU: the norm, the logits of every group and
        one batched Gumbel-max run on the device; the host waits for the norm and for the
        indices. Work runs on the stream of each tensor's framework (PyTorch's or CuPy's
        current stream). Returns the message and its :class:`EncodeInfo`."""
        cuda = _backend.cuda_module()
        gs = [_device.required_float_gpu_array(leaf, label) for leaf, label in zip(tree.leaves, tree.labels)]
        norm = _gpu_global_norm(gs, tree.labels)
        info = self._clip_info(norm)
        scale = info.scale
        seed = os_seed() if seed is None else check_seed(seed)
        gen = private_rng(rng)
        scales = [scale] * len(gs)
        if scale < 1.0 and norm > _PRESCALE_NORM:
            # Extreme float64 values: scale those tensors first so that no dot product
            # overflows (float32 ones cannot overflow and keep the factor in their logits).
            for i, g in enumerate(gs):
                if g.dtype == "float64":
                    out = _device.empty_like(g, g.shape, "float64")
                    cuda.scale_f64(g.device, g.stream, g.ptr, g.size, scale, out.ptr)
                    gs[i], scales[i] = out, 1.0
        ks = [1 << grp.bits for grp in layout.groups]
        offsets = np.zeros(len(ks) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(ks)
        first = gs[0]
        logits = _device.empty_like(first, (int(offsets[-1]),), "float64")
        for grp, off in zip(layout.groups, offsets[:-1]):
            rec._logits_gpu(
                gs[grp.tensor], grp.start, grp.size, seed, grp.group, grp.bits, self._sigma, scales[grp.tensor],
                logits.offset(int(off)),
            )
        # The same private draws, in the same order, as the CPU path's per-group calls.
        noise = np.concatenate([rec.gumbel_noise(k, gen) for k in ks])
        indices = cuda.gumbel_argmax(first.device, first.stream, logits.ptr, noise, offsets, scratch=first.scratch)
        msg = DPRECMessage(
            seed=seed, bits=layout.bits, indices=tuple(int(i) for i in indices), layout_digest=layout.digest
        )
        return msg, info

    # -- privacy accounting ---------------------------------------------------------------

    def _accounting_layout(self, template: Any) -> Layout:
        return template if isinstance(template, Layout) else self.layout(template)

    def epsilon(
        self,
        template: Any,
        *,
        rounds: int,
        clients_per_round: int,
        num_clients: int,
        delta: float,
        sampling: str = "with_replacement",
        reverse: str = "bound",
    ) -> DPRECAccounting:
        """Central (epsilon, delta) of a run with this codec (Algorithm 7, bit-width rule applied).

        :func:`dprec.accounting.dprec_epsilon` with ``clip_multiplier`` this codec's and ``bits``
        the TOTAL bits of one message, ``self.layout(template).total_bits``.

        Parameters
        ----------
        template : array, tensor, Mapping[str, array], sequence of arrays, or Layout
            The update's structure (values are not read), or its :class:`Layout`.
        rounds, clients_per_round, num_clients : int
            ``T``, ``B`` (the expected number for ``"poisson"``) and ``N``.
        delta : float
            Target delta in (0, 1).
        sampling : {"with_replacement", "poisson", "without_replacement"}
            How clients are drawn each round (see :mod:`dprec.accounting.dprec_rec`).
        reverse : {"bound", "exact"}
            ``"exact"`` is not available for ``"without_replacement"``.

        Returns
        -------
        dprec.accounting.DPRECAccounting

        Raises
        ------
        ValueError
            For invalid parameters (named), or when the overhead ``12 rho / 2^b`` reaches delta
            (naming ``bits``: the message's groups x bits and the smallest bits per group that
            would do). Warns :class:`dprec.accounting.DPRECPrivacyWarning` above 10% of delta.
        """
        from .accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        layout = self._accounting_layout(template)
        return dprec_rec._codec_epsilon(
            clip_multiplier=self._clip_multiplier, bits=layout.total_bits, groups=layout.num_groups, rounds=rounds,
            clients_per_round=clients_per_round, num_clients=num_clients, delta=delta, sampling=sampling,
            reverse=reverse,
        )

    def local_epsilon(self, template: Any, *, delta: float, rounds: int = 1) -> DPRECAccounting:
        """Local (epsilon, delta) of a client taking part in ``rounds`` rounds (no amplification).

        :func:`dprec.accounting.dprec_local_epsilon` with this codec's ``clip_multiplier`` and
        ``bits = self.layout(template).total_bits``, the bit-width rule applied with
        ``rho = rounds exp(c^2)``.

        Returns
        -------
        dprec.accounting.DPRECAccounting
        """
        from .accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        layout = self._accounting_layout(template)
        return dprec_rec._codec_local_epsilon(
            clip_multiplier=self._clip_multiplier, bits=layout.total_bits, groups=layout.num_groups, delta=delta,
            rounds=rounds,
        )

    def accountant(
        self,
        template: Any,
        *,
        num_clients: int,
        clients_per_round: int | None = None,
        delta: float,
        sampling: str = "with_replacement",
        rounds: int | None = None,
        reverse: str = "bound",
        sampling_rate: float | None = None,
    ) -> DPRECRoundAccountant:
        """A :class:`dprec.accounting.DPRECRoundAccountant` for a server loop using this codec.

        Step it once per round (``acc.step()``, or ``acc.step(clients_per_round=k)`` when a
        round had ``k`` clients); ``acc.epsilon`` is the guarantee so far. ``bits`` is
        ``self.layout(template).total_bits``; with ``rounds`` (the planned total) the bit-width
        rule is checked now, and it is checked again at every step. For ``sampling="poisson"``
        give either ``clients_per_round`` (the expected count, rate ``B / N``) or the rate
        itself as ``sampling_rate``.

        Returns
        -------
        dprec.accounting.DPRECRoundAccountant
        """
        from .accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        layout = self._accounting_layout(template)
        return dprec_rec.DPRECRoundAccountant(
            clip_multiplier=self._clip_multiplier, bits=layout.total_bits, num_clients=num_clients,
            clients_per_round=clients_per_round, delta=delta, sampling=sampling, reverse=reverse, rounds=rounds,
            groups=layout.num_groups, sampling_rate=sampling_rate,
        )

    # -- server ---------------------------------------------------------------------------

    def _check_message(self, msg: Any, layout: Layout, label: str) -> DPRECMessage:
        if isinstance(msg, (bytes, bytearray, memoryview)):
            msg = DPRECMessage.from_bytes(msg)
        if not isinstance(msg, DPRECMessage):
            raise TypeError(f"{label} must be a DPRECMessage or its bytes, got {type(msg).__name__}")
        if msg.layout_digest != layout.digest:
            raise ValueError(
                f"{label} does not match this codec and template: layout digest {msg.layout_digest.hex()} != "
                f"{layout.digest.hex()} (tensor names, shapes, max_group_size, bits or sigma differ from the encoder's)"
            )
        if msg.bits != layout.bits:
            raise ValueError(f"{label} has bits {msg.bits}, but its layout digest announces {layout.bits}")
        return msg

    def _prepare(self, template: Any) -> tuple[_Tree, Layout, list[tuple[int, ...]], list[bool], bool]:
        """Flattened template, its layout, shapes, torch-ness, and whether to decode on the GPU."""
        tree = _flatten(template, "template")
        shapes, torch_flags, device = _template_info(tree)
        on_gpu = _backend.resolve(self._backend, device, "template") == "cuda"
        if on_gpu and device is None:
            raise ValueError("backend='cuda' decodes into GPU arrays, but the template is on the host")
        return tree, self._make_layout(tree.names, shapes, tree.labels), shapes, torch_flags, on_gpu

    @staticmethod
    def _gpu_outputs(tree: _Tree, shapes: list[tuple[int, ...]]) -> list[_device.GpuArray]:
        """A float32 output per template tensor, in its framework, on its device."""
        outs = []
        for leaf, label, shape in zip(tree.leaves, tree.labels, shapes):
            like = _device.gpu_array(leaf, label)
            assert like is not None
            outs.append(_device.empty_like(like, shape, "float32"))
        return outs

    @staticmethod
    def _rebuild(tree: _Tree, arrays: list[np.ndarray], torch_flags: list[bool]) -> Any:
        out: list[Any] = list(arrays)
        if any(torch_flags):
            import torch  # noqa: PLC0415 - optional, only when the template holds tensors

            out = [torch.from_numpy(a) if f else a for a, f in zip(out, torch_flags)]
        if tree.kind == "single":
            return out[0]
        if tree.kind == "sequence":
            return tree.container(out)
        by_name = dict(zip(tree.names, out))
        return tree.container((k, by_name[k]) for k in tree.keys)

    def decode(self, message: DPRECMessage | bytes, template: Any) -> Any:
        """Decode one message into an update shaped like ``template``.

        Group ``g`` becomes ``float32(sigma) * z_{g, k*_g}``; only that candidate is
        generated (O(d)).

        Parameters
        ----------
        message : DPRECMessage or bytes
        template : array, tensor, Mapping[str, array] or sequence of arrays
            The structure to return: same container (dict/OrderedDict in the template's
            key order, list, tuple or a single array), names and shapes.

        Returns
        -------
        Same structure as ``template``, holding float32 NumPy arrays, or float32 CPU
        ``torch.Tensor`` where the template holds tensors; for a template on a GPU, float32
        arrays of its framework on its device.

        Raises
        ------
        ValueError
            If the message's layout digest does not match this codec and template.
        """
        tree, layout, shapes, torch_flags, on_gpu = self._prepare(template)
        msg = self._check_message(message, layout, "message")
        if on_gpu:
            cuda = _backend.cuda_module()
            scale = float(np.float32(self._sigma))
            outs = self._gpu_outputs(tree, shapes)
            for g in layout.groups:
                o = outs[g.tensor]
                cuda.stream_normals(
                    o.device, o.stream, msg.seed, msg.indices[g.group], g.group, 0, 0, g.size, scale, o.offset(g.start)
                )
            return self._rebuild(tree, [o.obj for o in outs], [False] * len(outs))
        split = {g.tensor for g in layout.groups if g.size != math.prod(shapes[g.tensor])}
        flats: list[Any] = [
            np.empty(math.prod(s), dtype=np.float32) if t in split else None for t, s in enumerate(shapes)
        ]
        for g in layout.groups:
            cand = rec.candidate(
                msg.seed, g.group, msg.indices[g.group], g.size, sigma=self._sigma, backend=self._backend
            )
            if flats[g.tensor] is None:
                flats[g.tensor] = cand
            else:
                flats[g.tensor][g.start : g.start + g.size] = cand
        arrays = [f.reshape(s) for f, s in zip(flats, shapes)]
        return self._rebuild(tree, arrays, torch_flags)

    def aggregate(self, messages: Sequence[Any], template: Any, weights: Any = None) -> Any:
        """Weighted sum of many clients' decoded updates, in one pass per group.

        ``out = sum_c weights[c] * decode(messages[c])``, accumulated in float64 in message
        order (``rec.accumulate``) and returned as float32; the result is identical
        between backends.

        Parameters
        ----------
        messages : iterable of DPRECMessage (or their bytes)
            Non-empty; all must match this codec and template.
        template : array, tensor, Mapping[str, array] or sequence of arrays
            The structure to return (as in :meth:`decode`).
        weights : array_like of float, shape (len(messages),), optional
            Finite weights; default ``1/n`` each, i.e. the mean. ValueError naming
            ``weights`` if ``sum |weights| * sigma * rec.MAX_ABS_NORMAL`` exceeds the float32
            maximum (the float32 result could overflow to inf); the result is always finite.

        Returns
        -------
        Same structure as ``template`` (float32 NumPy arrays or CPU tensors; on a GPU,
        arrays of the template's framework on its device).
        """
        if isinstance(messages, (DPRECMessage, bytes, bytearray, memoryview, str)):
            raise TypeError(f"messages must be a sequence of DPRECMessage, got a single {type(messages).__name__}")
        try:
            messages = list(messages)
        except TypeError:
            raise TypeError(f"messages must be a sequence of DPRECMessage, got {type(messages).__name__}") from None
        n = len(messages)
        if n == 0:
            raise ValueError("messages is empty")
        tree, layout, shapes, torch_flags, on_gpu = self._prepare(template)
        msgs = [self._check_message(m, layout, f"messages[{i}]") for i, m in enumerate(messages)]
        if weights is None:
            w = np.full(n, 1.0 / n)
        else:
            w = np.asarray(weights)
            if w.dtype.kind not in "fiu" or w.dtype == np.bool_:
                raise TypeError(f"weights must be real numbers, got dtype {w.dtype}")
            w = w.astype(np.float64)
            if w.shape != (n,):
                raise ValueError(f"weights must have shape ({n},) (one per message), got {w.shape}")
            if not np.isfinite(w).all():
                raise ValueError("weights contains NaN or infinite values")
        with np.errstate(over="ignore"):
            bound = float(np.sum(np.abs(w))) * self._sigma * rec.MAX_ABS_NORMAL
        if not bound <= float(np.finfo(np.float32).max):
            raise ValueError(
                f"weights too large for float32 output: sum |weights| * sigma * {rec.MAX_ABS_NORMAL:.6g} "
                f"(the largest |z|) = {bound:.6g} exceeds the float32 maximum, so the sum could overflow"
            )
        seeds = np.array([m.seed for m in msgs], dtype=np.uint64)
        idx = np.array([m.indices for m in msgs], dtype=np.uint32)  # (n, G)
        if on_gpu:
            cuda = _backend.cuda_module()
            outs = self._gpu_outputs(tree, shapes)
            for g in layout.groups:
                o = outs[g.tensor]
                _, s_u, k_u, coefs = rec._client_params(g.group, seeds, idx[:, g.group], self._sigma, w)
                cuda.aggregate_f32(o.device, o.stream, o.offset(g.start), g.size, g.group, s_u, k_u, coefs, scratch=o.scratch)
            return self._rebuild(tree, [o.obj for o in outs], [False] * len(outs))
        flats = [np.empty(math.prod(s), dtype=np.float32) for s in shapes]
        for g in layout.groups:
            acc = np.zeros(g.size, dtype=np.float64)
            rec.accumulate(acc, g.group, seeds, idx[:, g.group], sigma=self._sigma, weights=w, backend=self._backend)
            flats[g.tensor][g.start : g.start + g.size] = acc
        arrays = [f.reshape(s) for f, s in zip(flats, shapes)]
        return self._rebuild(tree, arrays, torch_flags)
