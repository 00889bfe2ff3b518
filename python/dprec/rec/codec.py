"""DP-REC codec for whole model updates.

A client compresses its model update ``phi = w_client - w_server`` (all tensors
together) into a 64-bit seed plus ``b_g`` bits per group; the server regenerates only
the chosen candidate of each group and can aggregate many clients in one pass::

    from dprec.rec.codec import DPRECCodec, DPRECMessage

    codec = DPRECCodec(sigma=0.01, clip_multiplier=1.0, bits=7)
    msg = codec.encode(update)                  # client
    blob = msg.to_bytes()                       # ~33 bytes + 7 bits per group
    msg = DPRECMessage.from_bytes(blob)         # server
    delta = codec.decode(msg, template)         # one client's decoded update
    mean = codec.aggregate(msgs, template)      # mean of many clients' updates

An update (and a template, which only supplies names, shapes and array types) is one of

* a single array (NumPy, PyTorch on the CPU or a GPU, CuPy, ...): one tensor named ``""``;
* a ``Mapping[str, array]`` such as a PyTorch ``state_dict``: one tensor per key;
* a ``list`` or ``tuple`` of arrays: tensors named ``"0"``, ``"1"``, ...

Every tensor must be floating point: float16 and bfloat16 are converted to float32, float32 and
float64 are used as they are; integer, boolean and complex tensors are rejected (TypeError naming
the tensor, e.g. ``update['fc.weight']``), so drop integer buffers such as ``num_batches_tracked``
from a ``state_dict`` first (:mod:`dprec.torch` does). An update on a GPU is encoded there, and a
template on a GPU decodes there, bit-identically to the CPU; all tensors of one update or template
must be on one device. Decoded tensors are float32, in the template's structure and framework.

``encode(update, return_info=True)`` also returns an :class:`EncodeInfo` (the norm before clipping,
whether it was clipped), which stays on the client. :meth:`DPRECCodec.layout` gives the groups and
the message size of a template. :meth:`DPRECCodec.epsilon`, :meth:`DPRECCodec.local_epsilon` and
:meth:`DPRECCodec.accountant` account a run with this codec, taking the bits and groups of a
message from the layout and passing ``threat_model=``, ``relation=`` and ``method=`` through to
:mod:`dprec.accounting.dprec_rec` (defaults ``"server"``, ``"zero"``, ``"sound"``); they import
:mod:`dprec.accounting` (SciPy) when called.

See the *DP-REC* page of the documentation for encoding and decoding step by step, *Which
guarantee do I have?* for the accounting, and *Randomness contract and wire formats* for the
canonical order, groups and bytes (:mod:`dprec.rec.message`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.arrays import Array
from .._runtime.updates import Tree, check_weights, flatten, leaf_arrays, message_list, plain_host_leaves, rebuild
from .._runtime.validation import check_bits, check_int, check_positive, check_seed, os_seed, private_rng
from ..constants import DEFAULT_BITS, MAX_STREAM_ELEMENTS
from . import kernels as rec
from .message import (  # the wire format's constants stay importable here, as from dprec.codec before
    _MAX_GROUPS,
    FLAG_UNIFORM_BITS,  # noqa: F401
    FORMAT_VERSION,  # noqa: F401
    MAGIC,  # noqa: F401
    DPRECMessage,
    Layout,
    LayoutGroup,
    _layout_digest,
)

if TYPE_CHECKING:  # dprec.accounting needs SciPy: imported lazily by the accounting methods
    from ..accounting import DPRECAccounting, DPRECRoundAccountant

__all__ = ["DPRECCodec", "EncodeInfo", "DEFAULT_BITS"]  # the wire format's names: dprec.rec.message

# Above this norm a float64 update is scaled before the logits so that no dot product overflows.
_PRESCALE_NORM = 1e200
# Below this sum of squares float64 squares may have underflowed; the norm is recomputed rescaled.
_TINY_SUMSQ = 2.0**-800
_FLOAT64_MAX = float(np.finfo(np.float64).max)

# Update structures whose layout a codec keeps (DPRECCodec._cached_layout).
_LAYOUT_CACHE_SIZE = 8

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


def _global_norm(kernels: Any, arrays: list[Array], labels: list[str]) -> float:
    """The L2 norm of all arrays together (float64); ValueError naming a non-finite tensor.

    One float64 pass per tensor (one wait on a GPU); a second, divided by ``max |x|``, only
    when the plain sum of squares over- or underflows (extreme float64 values).
    """
    sums, maxes = kernels.norm_stats(arrays, 1.0)
    if not all(math.isfinite(s) for s in sums):
        maxes = maxes or kernels.max_abs(arrays)
        for m, label in zip(maxes, labels):
            if not math.isfinite(m):
                raise ValueError(f"{label} contains {'NaN' if math.isnan(m) else 'infinite'} values")
    total = math.fsum(sums)
    if math.isfinite(total) and total > _TINY_SUMSQ:
        return math.sqrt(total)
    # Overflow or (partial) underflow of the plain sum of squares (an all-zero update too).
    maxes = maxes or kernels.max_abs(arrays)
    m = max(maxes)
    if m == 0.0:
        return 0.0
    total = math.fsum(kernels.norm_stats(arrays, m)[0])
    return m * math.sqrt(total)


def _accounting_bits(layout: Layout, method: Any) -> int:
    """The ``bits`` the accounting gets for a message with ``layout.num_groups`` groups.

    ``method="paper"``: the TOTAL bits (Theorem 1's ``12 rho / 2^b``, as the paper states it).
    Otherwise ``groups`` times the smallest group's bits: the sound bounds use the smallest
    group's ``K = 2^(bits // groups)`` (the REC message bound and the total-variation cost only
    grow as ``K`` shrinks), so with mixed bits the total would overstate ``K``; for uniform bits
    it is the total.
    """
    if isinstance(method, str) and method == "paper":
        return layout.total_bits
    return layout.num_groups * min(layout.bits)


class DPRECCodec:
    """DP-REC compression of whole model updates (see :mod:`dprec.rec.codec`).

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
    this codec (DP-REC, ``method="sound"`` against ``threat_model="server"`` with
    ``relation="zero"`` unless told otherwise; ``method="paper"`` for Algorithm 7 as printed) for
    clients sampled with replacement, by Poisson sampling or without replacement, taking the bits
    and groups of one message from :meth:`layout`. Against ``"server"``/``"messages"`` REC's
    messages are bounded directly (any bits); against ``"central"`` the better, per relation, of
    the Gaussian curves plus REC's total-variation cost (only while twice that cost is below
    delta) and the ``"messages"`` bound, which holds centrally by post-processing (any bits, no
    error); ``method="paper"`` applies the
    bit-width rule ``12 rho / 2^b < delta`` (``rho = rounds * clients_per_round * exp(c^2)``,
    ``b`` the total bits; ValueError naming ``bits`` with the groups x bits of the message and the
    smallest bits per group, a :class:`dprec.accounting.DPRECPrivacyWarning` above 10% of delta).
    ``encode(..., return_info=True)``
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
        _dispatch.check_backend(backend)
        self._backend = backend
        # (names, shapes) -> (Layout, groups table, logits offsets) of the last few update
        # structures: a client encodes one model's updates round after round, and building a
        # layout (its groups and digest) costs more Python than a small update's encode has.
        self._layouts: dict[tuple, tuple[Layout, np.ndarray, np.ndarray, np.ndarray, float]] = {}

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
        return self._cached_layout(names, shapes, labels)[0]

    def _cached_layout(
        self, names: tuple[str, ...], shapes: list[tuple[int, ...]], labels: list[str]
    ) -> tuple[Layout, np.ndarray, np.ndarray, np.ndarray, float]:
        """The layout, and the kernels' view of it: rows ``(tensor, start, size, group)``
        (uint64, (G, 4)), the offsets of each group's logits (int64, G + 1), each group's tensor
        (intp, G), all read-only, and the square root of the largest group's size. Computed once
        per (names, shapes) among the last :data:`_LAYOUT_CACHE_SIZE`."""
        key = (names, tuple(tuple(s) for s in shapes))
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        layout = self._build_layout(names, shapes, labels)
        rows = np.array([(g.tensor, g.start, g.size, g.group) for g in layout.groups], dtype=np.uint64).reshape(-1, 4)
        offsets = np.zeros(len(layout.groups) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([1 << g.bits for g in layout.groups])
        tensor_of_group = rows[:, 0].astype(np.intp)
        rows.flags.writeable = offsets.flags.writeable = tensor_of_group.flags.writeable = False
        sqrt_largest = math.sqrt(max(g.size for g in layout.groups))
        if len(self._layouts) >= _LAYOUT_CACHE_SIZE:
            self._layouts.clear()
        self._layouts[key] = (layout, rows, offsets, tensor_of_group, sqrt_largest)
        return self._layouts[key]

    def _build_layout(self, names: tuple[str, ...], shapes: list[tuple[int, ...]], labels: list[str]) -> Layout:
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
        tree = flatten(template, "template")
        arrays, _ = leaf_arrays(tree, "template")
        return self._make_layout(tree.names, [a.shape for a in arrays], tree.labels)

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
            accepted containers and dtypes (the canonical order is in *Randomness contract and
            wire formats* in the docs).
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
        tree = flatten(update, "update")
        arrays = plain_host_leaves(tree.leaves)
        leaves = arrays if arrays is not None else leaf_arrays(tree, "update")[0]
        layout, rows, offsets, tensor_of_group, sqrt_largest = self._cached_layout(
            tree.names, [a.shape for a in leaves], tree.labels
        )
        kernels = _dispatch.select(self._backend, leaves[0], "update")
        if arrays is None:
            # C-contiguous float32/float64 (float16/bfloat16 converted, non-contiguous host copies);
            # the norm below finds any NaN or infinity.
            arrays = [_arrays.float_input(a, label, check_finite=False) for a, label in zip(leaves, tree.labels)]
        norm = _global_norm(kernels, arrays, tree.labels)
        scale = self._clip_scale(norm)
        seed = os_seed() if seed is None else check_seed(seed)
        gen = private_rng(rng)
        scales = None  # per tensor, where some tensors are scaled first
        if scale < 1.0 and norm > _PRESCALE_NORM:
            # Extreme float64 values: scale those tensors first so that no dot product
            # overflows. float32 ones cannot overflow, and scaling them in float32 would
            # flush them to zero: they keep the factor in their logits.
            scales = [scale] * len(arrays)
            for i, a in enumerate(arrays):
                if a.dtype == "float64":
                    scaled = _arrays.empty(a, a.shape, "float64")
                    kernels.scale(a, scale, scaled)
                    arrays[i], scales[i] = scaled, 1.0
        logits = _arrays.empty(arrays[0], (int(offsets[-1]),), "float64")
        # Every group's logits in one kernel call (one native call on the CPU, with no Python per
        # group: a small update would otherwise spend more time in calls than in its candidates).
        if scales is None:
            factors = np.full(len(layout.groups), scale / self._sigma)
        else:
            factors = np.array(scales, dtype=np.float64)[tensor_of_group] / self._sigma
        # The private noise of G sample_index calls in group order, drawn at once: each value
        # takes one 64-bit word of rng (rec.gumbel_noise), so one draw of sum K_g values is the
        # concatenation of the G draws, bit for bit.
        words = rec._gumbel_words(int(offsets[-1]), gen)
        indices = kernels.sample_groups(arrays, seed, rows, offsets, factors, words, logits)
        # Cauchy-Schwarz: |<z_k, phi_g>| <= MAX_ABS_NORMAL sqrt(size_g) norm bounds every logit
        # (Python floats overflow to inf silently). Only an unclipped update near the float64
        # maximum can fail the bound; then the logits are checked.
        if not scale * norm * rec.MAX_ABS_NORMAL * sqrt_largest / self._sigma < _FLOAT64_MAX / 4:
            _arrays.require_finite(logits, "logits")
        msg = DPRECMessage._checked(seed, layout.bits, tuple(np.asarray(indices).tolist()), layout.digest)
        return (msg, self._clip_info(norm)) if return_info else msg

    def _clip_scale(self, norm: float) -> float:
        """The factor ``min(1, C / norm)`` of the global clip."""
        clip = self.clip_norm
        return clip / norm if norm > clip else 1.0

    def _clip_info(self, norm: float) -> EncodeInfo:
        """The clipping of an update of global L2 norm ``norm`` (shared by the CPU and GPU paths)."""
        clip = self.clip_norm
        clipped = norm > clip
        return EncodeInfo(norm=float(norm), clip_norm=clip, clipped=bool(clipped), scale=self._clip_scale(norm))

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
        threat_model: str | None = None,
        relation: str | None = None,
        method: str = "sound",
    ) -> DPRECAccounting:
        """Central (epsilon, delta) of a run with this codec against a stated observer.

        :func:`dprec.accounting.dprec_epsilon` with ``clip_multiplier`` this codec's,
        ``groups = self.layout(template).num_groups`` and ``bits`` the TOTAL bits of one message
        (``method="paper"``) or ``groups`` times the smallest group's bits (``method="sound"``:
        the same for uniform bits); ``threat_model``, ``relation`` and ``method`` are passed
        through unchanged.

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
            ``method="paper"``: how the reverse term is obtained. ``"exact"`` is not available for
            ``"without_replacement"``.
        threat_model : {"server", "messages", "central"}, optional
            Who observes (``method="sound"`` only); default ``"server"`` (it knows which client
            sent each message).
        relation : {"zero", "add_remove"}, optional
            The neighbouring relation of ``epsilon`` (``method="sound"`` only); default ``"zero"``.
            Both relations are in the result's ``epsilons``; one without a bound is ``inf``, with
            the reason in ``reasons``.
        method : {"sound", "paper"}
            ``"paper"``: Algorithm 7 as printed (``sampling="with_replacement"``, no threat model).

        Returns
        -------
        dprec.accounting.DPRECAccounting
            With ``threat_model``, ``relation``, ``epsilons``, ``reasons``, ``local`` and
            ``.guarantee`` (a :class:`dprec.accounting.PrivacyGuarantee`).

        Raises
        ------
        ValueError
            For invalid parameters (named; ``threat_model``, ``relation`` and ``method`` with the
            valid choices; ``method="paper"`` with another sampling or a threat model); naming
            ``bits`` when ``method="paper"`` and its overhead ``12 rho / 2^b`` reaches delta
            (the message's groups x bits and the smallest bits per group that would do; it warns
            :class:`dprec.accounting.DPRECPrivacyWarning` above 10% of delta). The default
            ``"server"`` (and ``"messages"``) bound REC's messages directly, and ``"central"``
            falls back on that bound: no bits rule for ``method="sound"``.
        """
        from ..accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        layout = self._accounting_layout(template)
        return dprec_rec._codec_epsilon(
            clip_multiplier=self._clip_multiplier, bits=_accounting_bits(layout, method), groups=layout.num_groups, rounds=rounds,
            clients_per_round=clients_per_round, num_clients=num_clients, delta=delta, sampling=sampling,
            reverse=reverse, threat_model=threat_model, relation=relation, method=method,
        )

    def local_epsilon(
        self,
        template: Any,
        *,
        delta: float,
        rounds: int = 1,
        threat_model: str | None = None,
        relation: str | None = None,
        method: str = "sound",
    ) -> DPRECAccounting:
        """Local (epsilon, delta) of a client taking part in ``rounds`` rounds (no amplification).

        :func:`dprec.accounting.dprec_local_epsilon` with this codec's ``clip_multiplier``,
        ``groups`` and ``bits`` from the layout as in :meth:`epsilon` (``method="sound"``: REC's
        messages as sent, no bits rule; ``method="paper"``: the bit-width rule with
        ``rho = rounds exp(c^2)``); ``threat_model`` (only ``"server"``, the default: an observer of
        the client's own messages), ``relation`` (default ``"zero"``; ``"add_remove"`` is ``inf``
        with the reason) and ``method`` (``"sound"`` or ``"paper"``) are passed through unchanged.

        Returns
        -------
        dprec.accounting.DPRECAccounting

        Raises
        ------
        ValueError
            For invalid parameters (named, with the valid choices), ``threat_model`` other than
            ``"server"``, or (``method="paper"``) an overhead that reaches delta (naming ``bits``).
        """
        from ..accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        layout = self._accounting_layout(template)
        return dprec_rec._codec_local_epsilon(
            clip_multiplier=self._clip_multiplier, bits=_accounting_bits(layout, method), groups=layout.num_groups, delta=delta,
            rounds=rounds, threat_model=threat_model, relation=relation, method=method,
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
        threat_model: str | None = None,
        relation: str | None = None,
        method: str = "sound",
        quantile_noise: float | None = None,
    ) -> DPRECRoundAccountant:
        """A :class:`dprec.accounting.DPRECRoundAccountant` for a server loop using this codec.

        Step it once per round (``acc.step()``, or ``acc.step(clients_per_round=k)`` when a
        round had ``k`` clients); ``acc.epsilon`` is the guarantee so far, against
        ``acc.threat_model`` under ``acc.relation`` (``acc.accounting`` has both relations and the
        reasons). ``bits`` and ``groups`` come from the layout as in :meth:`epsilon`; with
        ``rounds`` (the planned total) the bits are checked now when ``method="paper"`` (the
        bit-width rule), and again at every step. For
        ``sampling="poisson"`` give either ``clients_per_round`` (the expected count, rate
        ``B / N``) or the rate itself as ``sampling_rate``. ``threat_model`` (default ``"server"``),
        ``relation`` (default ``"zero"``) and ``method`` (default ``"sound"``) are passed through
        as in :meth:`epsilon`. ``quantile_noise`` (``s > 0``, ``method="sound"`` only): every message
        also carries adaptive clipping's noisy quantile bit (``1[||update|| <= C]`` plus a discrete
        Gaussian of scale ``s``, on a lattice), folded into each message's bound (inside the sampling mixture; the local guarantee adds
        :func:`dprec.accounting.quantile_bits_rdp` per message); ``None`` (default): no bits.

        Returns
        -------
        dprec.accounting.DPRECRoundAccountant

        Raises
        ------
        ValueError
            As :meth:`epsilon` (named arguments with the valid choices); a ``quantile_noise`` that
            is not finite and > 0, or given with ``method="paper"``, naming ``quantile_noise``.
        """
        from ..accounting import dprec_rec  # noqa: PLC0415 - SciPy is optional

        layout = self._accounting_layout(template)
        return dprec_rec.DPRECRoundAccountant(
            clip_multiplier=self._clip_multiplier, bits=_accounting_bits(layout, method), num_clients=num_clients,
            clients_per_round=clients_per_round, delta=delta, sampling=sampling, reverse=reverse, rounds=rounds,
            groups=layout.num_groups, sampling_rate=sampling_rate, threat_model=threat_model, relation=relation,
            method=method, quantile_noise=quantile_noise,
        )

    # -- server ---------------------------------------------------------------------------

    def _check_message(self, msg: Any, layout: Layout, label: str) -> DPRECMessage:
        if isinstance(msg, (bytes, bytearray, memoryview)):
            try:  # against the expected layout: a crafted length or group count costs nothing to refuse
                return DPRECMessage.from_bytes(msg, layout)  # digest and bits checked there
            except ValueError as e:
                raise ValueError(f"{label}: {e}") from None
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

    def _prepare(self, template: Any) -> tuple[Tree, Layout, list[Array], list[bool], Any]:
        """The flattened template, its layout, an uninitialised float32 output per tensor (on
        the template's device, in its framework), which tensors are PyTorch CPU tensors, and
        the kernels."""
        tree = flatten(template, "template")
        leaves, torch_flags = leaf_arrays(tree, "template")
        kernels = _dispatch.select(self._backend, leaves[0], "template")
        layout = self._make_layout(tree.names, [a.shape for a in leaves], tree.labels)
        outs = [_arrays.empty(a, a.shape, "float32") for a in leaves]
        return tree, layout, outs, torch_flags, kernels

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
        tree, layout, outs, torch_flags, kernels = self._prepare(template)
        msg = self._check_message(message, layout, "message")
        scale = float(np.float32(self._sigma))
        for g in layout.groups:
            out = outs[g.tensor].flat(g.start, g.size)
            kernels.stream_normals(out, msg.seed, msg.indices[g.group], g.group, 0, 0, scale)
        return rebuild(tree, outs, torch_flags)

    def accumulate(self, messages: Sequence[Any], out: Any, weights: Any = None) -> Any:
        """Add many clients' weighted decoded updates to float64 sums, in place: a server's streaming step.

        ``out += sum_c weights[c] * decode(messages[c])``, each element accumulated in float64
        in message order exactly as :meth:`aggregate` does (``rec.accumulate``), so a server can
        decode replies as they arrive, one batch at a time, holding one float64 array per tensor
        whatever the number of clients. Calls over batches ``m1``, ``m2`` give the same sums as
        one call over ``m1 + m2``. ``aggregate(ms, template, weights=w)`` equals
        ``float32(accumulate(ms, zeros, weights=w))``.

        Parameters
        ----------
        messages : iterable of DPRECMessage (or their bytes)
            Non-empty; all must match this codec and ``out``'s names and shapes.
        out : float64 array, tensor, Mapping[str, array] or sequence of arrays
            The sums, updated in place (C-contiguous, writeable float64; NumPy on the host, or
            arrays on one GPU); its names and shapes are the template's.
        weights : array_like of float, shape (len(messages),), optional
            Finite weights (default 1 each: the sum); negative weights subtract.

        Returns
        -------
        ``out``.
        """
        messages = message_list(messages, (DPRECMessage,), "DPRECMessage")
        n = len(messages)
        tree = flatten(out, "out")
        leaves, _ = leaf_arrays(tree, "out")
        for label, a in zip(tree.labels, leaves):
            if a.dtype != "float64":
                raise TypeError(f"{label} must be float64 (the accumulator of the sums), got {a.dtype}")
            if a.readonly or (a.host is not None and not a.host.flags.c_contiguous):
                raise ValueError(f"{label} must be a C-contiguous, writeable array")
        kernels = _dispatch.select(self._backend, leaves[0], "out")
        layout = self._make_layout(tree.names, [a.shape for a in leaves], tree.labels)
        msgs = [self._check_message(m, layout, f"messages[{i}]") for i, m in enumerate(messages)]
        w = np.ones(n) if weights is None else weights  # checked by _client_params, against the float64 maximum
        seeds = np.array([m.seed for m in msgs], dtype=np.uint64)
        idx = np.array([m.indices for m in msgs], dtype=np.uint32)  # (n, G)
        for g in layout.groups:
            _, seeds_g, indices_g, coefs = rec._client_params(
                g.group, seeds, idx[:, g.group], self._sigma, w, np.float64
            )
            kernels.accumulate(leaves[g.tensor].flat(g.start, g.size), g.group, seeds_g, indices_g, coefs)
        return out

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
        messages = message_list(messages, (DPRECMessage,), "DPRECMessage")
        n = len(messages)
        tree, layout, outs, torch_flags, kernels = self._prepare(template)
        msgs = [self._check_message(m, layout, f"messages[{i}]") for i, m in enumerate(messages)]
        w = check_weights(weights, n, self._sigma * rec.MAX_ABS_NORMAL)
        seeds = np.array([m.seed for m in msgs], dtype=np.uint64)
        idx = np.array([m.indices for m in msgs], dtype=np.uint32)  # (n, G)
        for g in layout.groups:
            _, seeds_g, indices_g, coefs = rec._client_params(g.group, seeds, idx[:, g.group], self._sigma, w)
            kernels.aggregate_f32(outs[g.tensor].flat(g.start, g.size), g.group, seeds_g, indices_g, coefs)
        return rebuild(tree, outs, torch_flags)
