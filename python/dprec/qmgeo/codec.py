"""QMGeo as a codec for whole model updates: :class:`QMGeoCodec`, its :class:`QMGeoMessage` and
byte format, and the :class:`QMGeoLayout` whose digest ties a message to the codec and template
that made it. :mod:`dprec.qmgeo` re-exports every public name::

    from dprec.qmgeo import QMGeoCodec, QMGeoMessage

    codec = QMGeoCodec(w_max=0.05, levels=8, p=0.9)
    msg = codec.encode(update)                  # client: ceil(log2 8) = 3 bits per coordinate
    blob = msg.to_bytes()                       # 32 bytes + ceil(3 d / 8)
    msg = QMGeoMessage.from_bytes(blob)         # server
    delta = codec.decode(msg, template)         # one client's quantized update
    mean = codec.aggregate(msgs, template)      # mean of many clients' quantized updates

Updates and templates are the containers of :class:`dprec.rec.codec.DPRECCodec` (one array, a
``Mapping[str, array]`` such as a PyTorch ``state_dict``, or a list / tuple of arrays; NumPy
arrays or PyTorch CPU tensors), in the same canonical order (mapping keys sorted, sequences in
order). Floating-point tensors only (float16 / bfloat16 / float32 / float64; integer, boolean and
complex tensors raise TypeError naming the tensor). Every coordinate is quantized independently by
:func:`dprec.qmgeo.quantize` (values outside ``[-w_max, w_max]`` clipped) under one
client-private seed per message that is never sent: the server learns only the level indices.
Decoding gives the levels as float32 in the template's structure; :meth:`QMGeoCodec.aggregate`
sums in float64 in message order (default weights ``1/n``: the mean) and rounds once. QMGeo runs
on the host: GPU updates and templates are refused (ValueError); copy them to the host first.

A message is ``32 + ceil(n b / 8)`` bytes for ``n`` coordinates at ``b = ceil(log2 R)`` bits.
:meth:`QMGeoMessage.from_bytes` and decoding raise ValueError naming the problem for a truncated,
corrupted or forged message, and a codec or template that differs from the encoder's (another
layout digest) raises ValueError.

Privacy: :meth:`QMGeoCodec.rdp`, :meth:`QMGeoCodec.privacy_event`, :meth:`QMGeoCodec.epsilon`
and :meth:`QMGeoCodec.guarantee` report the exact Renyi divergence of the implemented pmf
(:mod:`dprec.accounting.qmgeo`), against the ``"server"`` by default, ``relation="zero"``. Over
the whole interval ``[-w_max, w_max]`` it is **infinite** for every ``p`` and ``R`` (the end
points are quantized deterministically to the end levels); it is finite only for coordinates
restricted to a finite set of inputs strictly between levels (``inputs=``), a promise the encoder
does not check. :meth:`QMGeoCodec.paper_formulas` gives the paper's eqs. (20), (26) and
``|eq. (27)|``, labelled as the paper's: they are not guarantees for this quantizer.

See the *QMGeo* page of the documentation, and *Randomness contract and wire formats* for every
byte of the message and its layout digest.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.updates import Tree, check_weights, flatten, leaf_arrays, message_list, rebuild
from .._runtime.validation import check_int, private_seed
from .._runtime.wire import as_bytes, check_crc, hash_tensors, seal
from .quantizer import MAX_LEVELS, MAX_QUANTIZE_ELEMENTS, _check_host_backend, _probability, check_w_max, index_bits

if TYPE_CHECKING:  # dprec.accounting needs SciPy: imported lazily by the accounting methods
    from ..accounting import PrivacyGuarantee, QMGeoEvent

__all__ = [
    "QMGeoCodec",
    "QMGeoMessage",
    "QMGeoLayout",
    "QMGeoEncodeInfo",
    "QMGeoPaperFormulas",
    "QMGEO_MAGIC",
    "QMGEO_FORMAT_VERSION",
]

#: First bytes of every serialized QMGeo message.
QMGEO_MAGIC = b"QMGO"
#: Version of the byte format written by :meth:`QMGeoMessage.to_bytes`.
QMGEO_FORMAT_VERSION = 1

_HEADER = struct.Struct("<4sBBHI8sQ")  # magic, version, bits, flags, levels, digest, count
CRC = struct.Struct("<I")
_DIGEST_SIZE = 8
#: Most coordinates of one message (the count field is uint64; this keeps n * b far below 2**63).
MAX_MESSAGE_ELEMENTS = 1 << 40


def _payload_nbytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


# --------------------------------------------------------------------------------------
# Message
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=True)
class QMGeoMessage:
    """One client's quantized update: ``count`` level indices packed at ``ceil(log2 R)`` bits.

    Immutable and validated on construction (sizes, not the packed values: an index ``>= R`` is
    found when the indices are unpacked, by :meth:`indices` or a codec's decode). There is no
    seed: QMGeo's randomness is the client's own, and the indices are the whole message.

    Attributes
    ----------
    levels : int
        ``R``, ``2 .. 2**16``.
    count : int
        Number of coordinates ``n >= 1``.
    payload : bytes
        The packed indices, ``ceil(n b / 8)`` bytes (:func:`dprec.qmgeo.pack`).
    layout_digest : bytes
        8-byte digest of the encoder's :class:`QMGeoLayout`.
    """

    levels: int
    count: int
    payload: bytes
    layout_digest: bytes

    def __post_init__(self) -> None:
        levels = check_int(self.levels, "levels", 2, MAX_LEVELS)
        count = check_int(self.count, "count", 1, MAX_MESSAGE_ELEMENTS)
        payload = as_bytes(self.payload, "payload")
        expected = _payload_nbytes(count, index_bits(levels))
        if len(payload) != expected:
            raise ValueError(
                f"payload must have ceil(count * bits / 8) = {expected} bytes for {count} indices of "
                f"{index_bits(levels)} bits, got {len(payload)}"
            )
        digest = as_bytes(self.layout_digest, "layout_digest")
        if len(digest) != _DIGEST_SIZE:
            raise ValueError(f"layout_digest must be {_DIGEST_SIZE} bytes, got {len(digest)}")
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "payload", payload)
        object.__setattr__(self, "layout_digest", digest)

    @property
    def index_bits(self) -> int:
        """Bits per index, ``ceil(log2 R)``."""
        return index_bits(self.levels)

    @property
    def nbytes(self) -> int:
        """Length of :meth:`to_bytes`: ``32 + ceil(n b / 8)``."""
        return _HEADER.size + len(self.payload) + CRC.size

    def __repr__(self) -> str:
        return (
            f"QMGeoMessage(levels={self.levels}, count={self.count}, bits={self.index_bits}, "
            f"layout_digest={self.layout_digest.hex()}, nbytes={self.nbytes})"
        )

    def indices(self, *, backend: str = "auto") -> np.ndarray:
        """The unpacked level indices (uint16, shape ``(count,)``).

        Raises
        ------
        ValueError
            For an index ``>= levels`` or non-zero padding bits (a corrupted or forged payload).
        """
        from .quantizer import unpack  # noqa: PLC0415 - the message format itself needs no kernels

        return unpack(self.payload, self.levels, self.count, backend=backend)

    def to_bytes(self) -> bytes:
        """Serialize to the versioned byte format of :mod:`dprec.qmgeo.codec` (CRC-32 at the end)."""
        header = _HEADER.pack(
            QMGEO_MAGIC, QMGEO_FORMAT_VERSION, self.index_bits, 0, self.levels, self.layout_digest, self.count
        )
        return seal(header + self.payload)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, layout: QMGeoLayout | None = None) -> QMGeoMessage:
        """Parse bytes written by :meth:`to_bytes` (exactly one message).

        ``layout``, the layout the receiver expects (``codec.layout(template)``), is compared with
        the length, the coordinate count, the levels and the digest before the CRC is computed: for
        bytes from a sender you do not trust. The parse never unpacks the indices (that is done
        where they are decoded), so its cost is one CRC pass over ``data`` either way.

        Raises
        ------
        TypeError
            If ``data`` is not bytes-like, or ``layout`` not a :class:`QMGeoLayout`.
        ValueError
            Truncated input, trailing bytes, bad magic, unsupported version or flags, levels out
            of range, bits other than ``ceil(log2 levels)``, a zero count, or a CRC mismatch; or a
            message that does not match ``layout``.
        """
        data = as_bytes(data, "from_bytes")
        if layout is not None and not isinstance(layout, QMGeoLayout):
            raise TypeError(f"layout must be a QMGeoLayout (codec.layout(template)), got {type(layout).__name__}")
        n = len(data)
        magic = QMGEO_MAGIC
        if n < len(magic) and data == magic[:n]:
            raise ValueError(f"QMGeo message truncated: {n} bytes, shorter than the {len(magic)}-byte magic")
        if data[: len(magic)] != magic:
            raise ValueError(f"not a QMGeo message: bad magic {data[: len(magic)]!r} (expected {magic!r})")
        if n < len(magic) + 1:
            raise ValueError(f"QMGeo message truncated: {n} bytes, no format version")
        version = data[len(magic)]
        if version != QMGEO_FORMAT_VERSION:
            raise ValueError(
                f"unsupported QMGeo message format version {version} (this dprec reads version "
                f"{QMGEO_FORMAT_VERSION})"
            )
        min_len = _HEADER.size + CRC.size
        if n < min_len:
            raise ValueError(f"QMGeo message truncated: {n} bytes, shorter than the minimum of {min_len}")
        _, _, bits, flags, levels, digest, count = _HEADER.unpack_from(data, 0)
        if layout is not None and (
            n != layout.message_nbytes or digest != layout.digest or count != layout.num_elements
            or levels != layout.levels
        ):
            raise ValueError(
                f"QMGeo message does not match the expected layout: {n} bytes, {count} coordinates, {levels} levels, "
                f"layout digest {digest.hex()}; expected {layout.message_nbytes} bytes, {layout.num_elements} "
                f"coordinates, {layout.levels} levels, {layout.digest.hex()}"
            )
        if flags:
            raise ValueError(f"unsupported QMGeo message flags 0x{flags:04x} (none are defined)")
        if not 2 <= levels <= MAX_LEVELS:
            raise ValueError(f"invalid QMGeo message: levels = {levels} is outside 2..{MAX_LEVELS}")
        if bits != index_bits(levels):
            raise ValueError(
                f"invalid QMGeo message: {bits} bits per index, but levels = {levels} needs {index_bits(levels)}"
            )
        if not 1 <= count <= MAX_MESSAGE_ELEMENTS:
            raise ValueError(f"invalid QMGeo message: coordinate count {count} is outside 1..2**40")
        expected = _HEADER.size + _payload_nbytes(count, bits) + CRC.size
        if n < expected:
            raise ValueError(f"QMGeo message truncated: {n} bytes, expected {expected}")
        if n > expected:
            raise ValueError(f"QMGeo message has {n - expected} trailing bytes after its {expected} bytes")
        check_crc(data, "QMGeo")
        return cls(levels=levels, count=count, payload=data[_HEADER.size : n - CRC.size], layout_digest=digest)


# --------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QMGeoLayout:
    """Names, shapes and quantizer of the updates a :class:`QMGeoCodec` encodes.

    Returned by :meth:`QMGeoCodec.layout`; encoder and decoder must agree on it, which the
    message's :attr:`digest` checks.

    Attributes
    ----------
    names : tuple of str
        Tensor names in canonical order (sorted mapping keys, sequence indices as strings,
        ``""`` for a single array).
    shapes : tuple of tuple of int
        Their shapes.
    levels, p, w_max
        The quantizer.
    digest : bytes
        8-byte BLAKE2b digest of all of the above.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    levels: int
    p: float
    w_max: float
    digest: bytes

    @property
    def sizes(self) -> tuple[int, ...]:
        """Elements of each tensor."""
        return tuple(math.prod(s) for s in self.shapes)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Position of each tensor's first coordinate in the message (canonical order)."""
        out, total = [], 0
        for size in self.sizes:
            out.append(total)
            total += size
        return tuple(out)

    @property
    def num_elements(self) -> int:
        """Coordinates ``d`` of one message."""
        return sum(self.sizes)

    @property
    def index_bits(self) -> int:
        """Bits per coordinate, ``ceil(log2 R)``."""
        return index_bits(self.levels)

    @property
    def message_nbytes(self) -> int:
        """Size of a serialized message: ``32 + ceil(d b / 8)`` bytes."""
        return _HEADER.size + _payload_nbytes(self.num_elements, self.index_bits) + CRC.size

    def describe(self) -> str:
        """A human-readable table of the tensors."""
        rows = [f"{'tensor':<30} {'shape':<20} {'offset':>12} {'size':>12}"]
        for name, shape, off, size in zip(self.names, self.shapes, self.offsets, self.sizes):
            rows.append(f"{name!r:<30} {str(shape):<20} {off:>12} {size:>12}")
        rows.append(
            f"{len(self.names)} tensors, {self.num_elements} coordinates, R = {self.levels} levels "
            f"({self.index_bits} bits each), p = {self.p!r}, w_max = {self.w_max!r}: {self.message_nbytes} bytes per "
            f"message, digest {self.digest.hex()}"
        )
        return "\n".join(rows)


def _layout_digest(names: tuple[str, ...], shapes: tuple[tuple[int, ...], ...], levels: int, p: float,
                   w_max: float) -> bytes:
    h = hashlib.blake2b(digest_size=_DIGEST_SIZE, person=b"dprec.qmg.layout")
    h.update(struct.pack("<BI", QMGEO_FORMAT_VERSION, len(names)))
    hash_tensors(h, names, shapes)
    h.update(struct.pack("<Idd", levels, p, w_max))
    return h.digest()


# --------------------------------------------------------------------------------------
# Codec
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QMGeoEncodeInfo:
    """Client-side clipping diagnostics of one :meth:`QMGeoCodec.encode` call (never sent).

    Attributes
    ----------
    elements : int
        Coordinates quantized.
    clipped : int
        How many had ``|w| > w_max`` (clipped to the end levels).
    max_abs : float
        The largest ``|w|``: a private statistic of the update, keep it on the client.
    """

    elements: int
    clipped: int
    max_abs: float


@dataclass(frozen=True)
class QMGeoPaperFormulas:
    """Wang and Gursoy's per-round epsilons for a template, **as printed in the paper**.

    These reproduce the paper's numbers; they are not guarantees for dprec's quantizer, whose
    exact divergence over ``[-w_max, w_max]`` is infinite (:meth:`QMGeoCodec.rdp`).

    Attributes
    ----------
    eq20 : float
        Pure-DP epsilon of one coordinate, ``-(ln p + (R-2) ln(1-p))``.
    eq26 : float
        ``d kappa`` times eq. (20).
    eq27_abs : float
        ``|eq. (27)|`` at order ``alpha``: the paper's reported RDP per round (its printed formula is
        negative). ``nan`` at ``p = 1``, where eq. (25) is undefined.
    alpha : float
        The order of ``eq27_abs``.
    """

    eq20: float
    eq26: float
    eq27_abs: float
    alpha: float


class QMGeoCodec:
    """QMGeo compression of whole model updates (see :mod:`dprec.qmgeo.codec`).

    Parameters
    ----------
    w_max : float
        The clipping bound ``Wmax`` of every coordinate, finite and > 0.
    levels : int
        ``R``, ``2 <= R <= 2**16``; ``ceil(log2 R)`` bits per coordinate.
    p : float
        Geometric parameter in ``[2**-512, 1]``; ``p = 1`` is plain unbiased stochastic
        rounding, smaller ``p`` spreads mass to far levels (biased towards the middle).
    backend : {"auto", "cpu", "reference"}
        Kernel backend; both give the same bits. QMGeo runs on the host ("cuda" is refused).

    Raises
    ------
    ValueError, TypeError
        For a parameter out of range or of the wrong type (named in the message).
    """

    def __init__(self, w_max: float, levels: int, p: float, *, backend: str = "auto") -> None:
        self._levels = check_int(levels, "levels", 2, MAX_LEVELS)
        self._w_max = check_w_max(w_max, self._levels)
        self._p = _probability(p, "p")
        _check_host_backend(backend, "QMGeo")
        self._backend = backend

    @property
    def w_max(self) -> float:
        """Clipping bound of every coordinate."""
        return self._w_max

    @property
    def levels(self) -> int:
        """``R``."""
        return self._levels

    @property
    def p(self) -> float:
        """Geometric parameter."""
        return self._p

    @property
    def index_bits(self) -> int:
        """Bits per coordinate on the wire, ``ceil(log2 R)``."""
        return index_bits(self._levels)

    @property
    def step(self) -> float:
        """Distance between levels, ``2 w_max / (R - 1)``."""
        return 2.0 * self._w_max / (self._levels - 1)

    @property
    def backend(self) -> str:
        """The backend argument."""
        return self._backend

    def __repr__(self) -> str:
        return f"QMGeoCodec(w_max={self._w_max!r}, levels={self._levels!r}, p={self._p!r}, backend={self._backend!r})"

    # -- layout ---------------------------------------------------------------------------

    def _make_layout(self, tree: Tree, shapes: list[tuple[int, ...]]) -> QMGeoLayout:
        for label, shape in zip(tree.labels, shapes):
            if math.prod(shape) > MAX_QUANTIZE_ELEMENTS:
                raise ValueError(f"{label} has {math.prod(shape)} elements, more than the 2**33 one tensor can have")
        total = sum(math.prod(s) for s in shapes)
        if total > MAX_MESSAGE_ELEMENTS:
            raise ValueError(f"the update has {total} elements, more than the 2**40 one message can hold")
        shapes_t = tuple(tuple(int(d) for d in s) for s in shapes)
        digest = _layout_digest(tree.names, shapes_t, self._levels, self._p, self._w_max)
        return QMGeoLayout(tree.names, shapes_t, self._levels, self._p, self._w_max, digest)

    def _read(self, obj: Any, what: str) -> tuple[Tree, list[_arrays.Array], list[bool], QMGeoLayout, Any]:
        tree = flatten(obj, what)
        leaves, torch_flags = leaf_arrays(tree, what)
        if leaves[0].on_gpu:
            raise ValueError(
                f"{tree.labels[0]} is on {leaves[0].label}, but QMGeoCodec runs on the host (quantization is the "
                f"client's step, decoding a pass over the packed bits): pass host arrays (copy GPU tensors to the host "
                f"first, and move the decoded result back)"
            )
        kernels = _dispatch.select(self._backend, leaves[0], tree.labels[0])
        layout = self._make_layout(tree, [a.shape for a in leaves])
        return tree, leaves, torch_flags, layout, kernels

    def layout(self, template: Any) -> QMGeoLayout:
        """The layout of updates shaped like ``template`` (names and shapes only; values unread)."""
        return self._read(template, "template")[3]

    def _layout_of(self, template: Any) -> QMGeoLayout:
        return template if isinstance(template, QMGeoLayout) else self.layout(template)

    # -- client ---------------------------------------------------------------------------

    def encode(
        self, update: Any, rng: np.random.Generator | None = None, *, return_info: bool = False
    ) -> QMGeoMessage | tuple[QMGeoMessage, QMGeoEncodeInfo]:
        """Quantize and pack a model update.

        Parameters
        ----------
        update : array, tensor, Mapping[str, array] or sequence of arrays
            Host floating-point tensors (see :mod:`dprec.qmgeo.codec`).
        rng : numpy.random.Generator, optional
            Where the message's private seed comes from (tests, reproducibility); default the
            OS entropy source. The seed is never sent or returned.
        return_info : bool
            Also return the clipping diagnostics (:class:`QMGeoEncodeInfo`).

        Returns
        -------
        QMGeoMessage, or (QMGeoMessage, QMGeoEncodeInfo)

        Raises
        ------
        TypeError
            Non-floating-point tensors (named), bad container keys, a non-bool ``return_info``.
        ValueError
            NaN/inf or empty tensors (named), GPU tensors, an empty update.
        """
        if not isinstance(return_info, (bool, np.bool_)):
            raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
        tree, leaves, _, layout, kernels = self._read(update, "update")
        arrays = [_arrays.float_input(a, label, max_size=None) for a, label in zip(leaves, tree.labels)]
        seed = private_seed(rng)  # after validation: a refused call draws nothing from rng
        indices = _arrays.empty(None, (layout.num_elements,), "uint16")
        for t, (a, offset) in enumerate(zip(arrays, layout.offsets)):
            # float32 or float64: the kernels widen float32 exactly, without a float64 copy.
            kernels.qmgeo_quantize(a.reshaped((a.size,)), seed, t, self._w_max, self._levels, self._p,
                                   indices.flat(offset, a.size))
        payload = _arrays.empty(None, (_payload_nbytes(layout.num_elements, layout.index_bits),), "uint8")
        kernels.qmgeo_pack(indices, layout.index_bits, payload)
        assert payload.host is not None
        msg = QMGeoMessage(self._levels, layout.num_elements, payload.host.tobytes(), layout.digest)
        if not return_info:
            return msg
        hosts = [a.host for a in arrays]
        clipped = sum(int(np.count_nonzero(np.abs(h) > self._w_max)) for h in hosts if h is not None)
        max_abs = max(kernels.max_abs(arrays))
        return msg, QMGeoEncodeInfo(elements=layout.num_elements, clipped=clipped, max_abs=float(max_abs))

    # -- server ---------------------------------------------------------------------------

    def _check_message(self, msg: Any, layout: QMGeoLayout, label: str) -> QMGeoMessage:
        if isinstance(msg, (bytes, bytearray, memoryview)):
            try:  # against the expected layout: refused before the CRC pass when it does not match
                return QMGeoMessage.from_bytes(msg, layout)  # digest, levels and count checked there
            except ValueError as e:
                raise ValueError(f"{label}: {e}") from None
        if not isinstance(msg, QMGeoMessage):
            raise TypeError(f"{label} must be a QMGeoMessage or its bytes, got {type(msg).__name__}")
        if msg.layout_digest != layout.digest:
            raise ValueError(
                f"{label} does not match this codec and template: layout digest {msg.layout_digest.hex()} != "
                f"{layout.digest.hex()} (tensor names, shapes, levels, p or w_max differ from the encoder's)"
            )
        if msg.levels != layout.levels or msg.count != layout.num_elements:
            raise ValueError(
                f"{label} has {msg.count} coordinates of {msg.levels} levels, but its layout digest announces "
                f"{layout.num_elements} of {layout.levels}"
            )
        return msg

    def _accumulate(self, msgs: Sequence[QMGeoMessage | bytes], coefs: np.ndarray, template: Any) -> Any:
        """``sum_c coefs[c] * Bin(indices_c)`` in float64, in message order, as float32 tensors."""
        tree, leaves, torch_flags, layout, kernels = self._read(template, "template")
        checked = [self._check_message(m, layout, f"messages[{i}]") for i, m in enumerate(msgs)]
        acc = _arrays.empty(None, (layout.num_elements,), "float64", zero=True)
        for m, c in zip(checked, coefs.tolist()):
            payload = _arrays.read(np.frombuffer(m.payload, dtype=np.uint8), "payload")
            kernels.qmgeo_accumulate(payload, layout.index_bits, self._levels, c, -self._w_max, self.step, acc)
        assert acc.host is not None
        outs = [
            acc.host[off : off + size].astype(np.float32).reshape(shape)
            for off, size, shape in zip(layout.offsets, layout.sizes, layout.shapes)
        ]
        return rebuild(tree, outs, torch_flags)

    def decode(self, message: QMGeoMessage | bytes, template: Any) -> Any:
        """One client's quantized update, ``Bin(j)`` per coordinate, shaped like ``template``.

        Returns
        -------
        Same structure as ``template``: float32 NumPy arrays, or float32 CPU tensors where the
        template holds PyTorch tensors. The values are ``float32(-w_max + j * step)``.

        Raises
        ------
        ValueError
            A message of another layout (digest), or a corrupted payload (index >= R, padding).
        """
        if isinstance(message, (list, tuple)):
            raise TypeError("decode takes one message; use aggregate for many")
        return self._accumulate([message], np.ones(1), template)

    def aggregate(self, messages: Sequence[Any], template: Any, weights: Any = None) -> Any:
        """Weighted sum of many clients' quantized updates (default: their mean).

        ``out = sum_c weights[c] * Bin(indices_c)``, accumulated in float64 in message order and
        rounded once to float32; native and reference give the same bits.

        Parameters
        ----------
        messages : sequence of QMGeoMessage (or their bytes)
            Non-empty; all must match this codec and template.
        template : array, tensor, Mapping[str, array] or sequence of arrays
            The structure to return (as in :meth:`decode`).
        weights : array_like of float, shape (len(messages),), optional
            Finite weights; default ``1/n`` each. ValueError naming ``weights`` when
            ``sum |weights| * w_max`` exceeds the float32 maximum.
        """
        msgs = message_list(messages, (QMGeoMessage,), "QMGeoMessage")
        w = check_weights(weights, len(msgs), self._w_max)
        return self._accumulate(msgs, w, template)

    # -- privacy accounting ---------------------------------------------------------------

    def _event_params(self, template: Any, sampling_rate: float, inputs: Any) -> dict[str, Any]:
        layout = self._layout_of(template)
        return dict(levels=self._levels, p=self._p, dim=layout.num_elements, sampling_rate=sampling_rate,
                    inputs=inputs, w_max=self._w_max)

    def rdp(self, template: Any, orders: Any, *, sampling_rate: float = 1.0, inputs: Any = None) -> np.ndarray:
        """Exact per-round RDP of this codec on updates shaped like ``template``.

        :func:`dprec.accounting.qmgeo.qmgeo_rdp` with ``d`` the template's coordinate count:
        ``d`` times the worst-case Renyi divergence of the implemented pmf between two inputs of
        one coordinate, then Poisson amplification at ``sampling_rate`` (integer orders only).

        Parameters
        ----------
        template : array, tensor, Mapping, sequence, or QMGeoLayout
        orders : float or sequence of float
            Renyi orders > 1.
        sampling_rate : float
            Poisson rate of records in (0, 1] (the paper's kappa).
        inputs : sequence of float, optional
            The finite set of values every coordinate is promised to take (e.g. a grid strictly
            between the levels). ``None``: the whole ``[-w_max, w_max]``, whose RDP is ``inf``.

        Returns
        -------
        numpy.ndarray
            float64 RDP, one value per order.
        """
        from ..accounting import qmgeo as acct  # noqa: PLC0415 - SciPy is optional

        return acct.qmgeo_rdp(orders, **self._event_params(template, sampling_rate, inputs))

    def privacy_event(self, template: Any, *, sampling_rate: float = 1.0, inputs: Any = None) -> QMGeoEvent:
        """One round as a :class:`dprec.accounting.QMGeoEvent` (compose it with an
        :class:`dprec.accounting.Accountant`); arguments as in :meth:`rdp`."""
        from ..accounting import QMGeoEvent  # noqa: PLC0415 - SciPy is optional

        return QMGeoEvent(**self._event_params(template, sampling_rate, inputs))

    def epsilon(
        self,
        template: Any,
        *,
        delta: float,
        rounds: int = 1,
        sampling_rate: float = 1.0,
        inputs: Any = None,
        threat_model: str = "server",
        relation: str = "zero",
    ) -> float:
        """(epsilon, ``delta``)-DP of ``rounds`` rounds against ``threat_model``, from the exact RDP (:meth:`rdp`).

        ``self.guarantee(...).epsilon`` (see :meth:`guarantee`): ``inf`` unless ``inputs``
        restricts the coordinates to a finite set (module docstring), and ``inf`` for
        ``relation="add_remove"`` (the reason is in :meth:`guarantee`'s ``reasons``).
        """
        return self.guarantee(
            template, delta=delta, rounds=rounds, sampling_rate=sampling_rate, inputs=inputs,
            threat_model=threat_model, relation=relation,
        ).epsilon

    def guarantee(
        self,
        template: Any,
        *,
        delta: float,
        rounds: int = 1,
        sampling_rate: float = 1.0,
        inputs: Any = None,
        threat_model: str = "server",
        relation: str = "zero",
    ) -> PrivacyGuarantee:
        """The :class:`dprec.accounting.PrivacyGuarantee` of ``rounds`` rounds in which the client takes part.

        :meth:`privacy_event` composed ``rounds`` times by an
        :class:`dprec.accounting.Accountant` with this ``threat_model`` and ``relation``, converted
        at ``delta`` (the improved RDP conversion, both directions).

        QMGeo is a local randomizer: the curve bounds one client's message under a change of its
        input, so it holds against the ``"server"`` (the default: it knows who sent each message)
        and hence, by post-processing, against ``"messages"`` and ``"central"`` observers, for
        ``relation="zero"`` (the default: the client's input replaced). ``relation="add_remove"``
        has no bound (an added client adds a message): ``inf``, with the reason in ``reasons``.
        ``sampling_rate`` is the Poisson rate of records inside the client (the paper's kappa).

        Raises
        ------
        ValueError
            For an unknown ``threat_model`` or ``relation`` (naming it, with the valid choices)
            and other invalid parameters (named).
        """
        import dataclasses  # noqa: PLC0415

        rounds = check_int(rounds, "rounds", 1, 1 << 62)
        from ..accounting import Accountant  # noqa: PLC0415 - SciPy is optional
        from ..accounting.guarantee import check_relation, check_threat_model  # noqa: PLC0415

        tm = check_threat_model(threat_model)
        rel = check_relation(relation)
        event = self.privacy_event(template, sampling_rate=sampling_rate, inputs=inputs)
        result = Accountant(threat_model=tm, relation=rel).compose(event, rounds).guarantee(delta)
        return dataclasses.replace(
            result, mechanism="qmgeo", sampling="poisson (records)" if sampling_rate < 1.0 else None,
            composition=f"{rounds} rounds of the client's QMGeo message (adaptive RDP composition)",
        )

    def paper_formulas(self, template: Any, *, sampling_rate: float = 1.0, alpha: float = 2.0) -> QMGeoPaperFormulas:
        """The paper's eqs. (20), (26) and ``|eq. (27)|`` for this codec and template, as printed
        (:class:`QMGeoPaperFormulas`; not guarantees for this quantizer)."""
        from ..accounting import qmgeo as acct  # noqa: PLC0415 - SciPy is optional

        d = self._layout_of(template).num_elements
        eq27 = math.nan
        if self._p < 1.0:
            eq27 = acct.qmgeo_paper_eq27(alpha, self._levels, self._p, d, sampling_rate, absolute=True)
        return QMGeoPaperFormulas(
            eq20=acct.qmgeo_paper_eq20(self._levels, self._p),
            eq26=acct.qmgeo_paper_eq26(self._levels, self._p, d, sampling_rate),
            eq27_abs=eq27,
            alpha=float(alpha),
        )
