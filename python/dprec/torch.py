"""PyTorch helpers: model updates in, model updates out.

:class:`dprec.rec.codec.DPRECCodec` works on any mapping of floating-point tensors. A
PyTorch model's ``state_dict`` is almost that, but not quite: it holds integer buffers
(BatchNorm's ``num_batches_tracked``), may hold float16 / bfloat16 tensors, and lists a
tied (shared) weight under every name it is reachable by. This module bridges the gap::

    import dprec.torch as dpt
    from dprec import DPRECCodec

    codec = DPRECCodec(sigma=0.01, clip_multiplier=1.0, bits=7)

    # client: the update of its local model against the global model it started from
    update = dpt.model_update(local_model, global_model)      # ModelUpdate (a Mapping)
    blob = codec.encode(update).to_bytes()

    # server: decode / aggregate into the same names and shapes, then step the model
    mean = codec.aggregate(blobs, dpt.decode_template(global_model))
    dpt.apply_update(global_model, mean)

A *model* is a :class:`torch.nn.Module` (its ``state_dict()``: parameters and persistent buffers)
or a state-dict-like ``Mapping[str, torch.Tensor]``. Only floating-point entries with at least one
element form the update (floating buffers such as BatchNorm's running statistics included);
the others are reported in :attr:`ModelUpdate.skipped`. Tied tensors count once, under their first
name (:attr:`ModelUpdate.aliases`). float16 and bfloat16 are upcast before any arithmetic.

Importing :mod:`dprec` never imports PyTorch; importing this module does (install it
pinned to the version you use, e.g. ``pip install "dprec[torch]" "torch==2.13.0"``: the extra
only sets a lower bound, and an unpinned ``torch`` pulls the multi-GB CUDA build). See the
*PyTorch* page of the documentation for the rules in full.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any, Union

import numpy as np

try:
    import torch  # absolute import: PyTorch, not this module
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        'dprec.torch needs PyTorch, which is not installed: pip install "dprec[torch]" "torch==2.13.0" '
        "(pin the version you use: an unpinned torch pulls the multi-GB CUDA build)"
    ) from exc

__all__ = ["ModelUpdate", "apply_update", "decode_template", "model_update"]

ModelLike = Union[torch.nn.Module, Mapping[str, torch.Tensor]]


# --------------------------------------------------------------------------------------
# State dicts, entries and aliases
# --------------------------------------------------------------------------------------


def _state_dict(model: Any, name: str) -> dict[str, torch.Tensor]:
    """``model``'s entries as an ordered dict of tensors (detached, not copied)."""
    if isinstance(model, torch.nn.Module):
        return _no_meta(dict(model.state_dict()), name)
    if isinstance(model, Mapping):
        out: dict[str, torch.Tensor] = {}
        for k, v in model.items():
            if not isinstance(k, str):
                raise TypeError(f"{name} keys must be str, got {type(k).__name__} ({k!r})")
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{name}[{k!r}] must be a torch.Tensor, got {type(v).__name__}")
            out[k] = v.detach()
        return _no_meta(out, name)
    raise TypeError(
        f"{name} must be a torch.nn.Module or a Mapping[str, torch.Tensor] (a state_dict), got {type(model).__name__}"
    )


def _no_meta(sd: dict[str, torch.Tensor], name: str) -> dict[str, torch.Tensor]:
    """``sd``, or a ValueError naming the first entry on the meta device (it has a shape but no values)."""
    for k, v in sd.items():
        if v.is_meta:
            raise ValueError(
                f"{name}[{k!r}] is on the meta device: it has no values to read or write; materialize it first "
                "(e.g. module.to_empty(device=...) and load its weights)"
            )
    return sd


def _storage_key(t: torch.Tensor) -> tuple | None:
    """What makes two entries the same tensor; None where identity cannot be told."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # tensors without storage (e.g. some subclasses)
        return None
    if ptr == 0:
        return None
    return (str(t.device), ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


class _Entries:
    """A state dict split into kept floating entries, aliases and skipped entries."""

    def __init__(self, sd: dict[str, torch.Tensor]) -> None:
        self.sd = sd
        self.kept: list[str] = []
        self.aliases: dict[str, str] = {}
        self.skipped: list[str] = []
        first: dict[tuple, str] = {}
        for k, t in sd.items():
            if not t.is_floating_point() or t.numel() == 0:
                self.skipped.append(k)
                continue
            key = _storage_key(t)
            if key is not None and key in first:
                self.aliases[k] = first[key]
                continue
            if key is not None:
                first[key] = k
            self.kept.append(k)


def _entries(model: Any, name: str) -> _Entries:
    return _Entries(_state_dict(model, name))


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str, a torch.device or None, got {type(device).__name__}")
    try:
        return torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device {device!r} is not a valid torch device: {e}") from None


# --------------------------------------------------------------------------------------
# ModelUpdate
# --------------------------------------------------------------------------------------


class ModelUpdate(Mapping):
    """The floating-point difference of two models, ready for :meth:`DPRECCodec.encode`.

    A read-only ``Mapping[str, torch.Tensor]`` in the model's ``state_dict`` order;
    created by :func:`model_update`.

    Attributes
    ----------
    skipped : tuple of str
        Entries of the model left out: non-floating (integer or boolean buffers such as
        ``num_batches_tracked``) or empty.
    aliases : dict of str to str
        Tied tensors: each further name of a shared tensor -> the name it is kept under.
    """

    __slots__ = ("_data", "_skipped", "_aliases")

    def __init__(self, data: dict[str, torch.Tensor], skipped: tuple[str, ...], aliases: dict[str, str]) -> None:
        self._data = data
        self._skipped = tuple(skipped)
        self._aliases = dict(aliases)

    @property
    def skipped(self) -> tuple[str, ...]:
        """Names of the non-floating (or empty) entries left out."""
        return self._skipped

    @property
    def aliases(self) -> dict[str, str]:
        """A copy of the alias -> kept-name mapping of tied tensors."""
        return dict(self._aliases)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        n = sum(t.numel() for t in self._data.values())
        devices = sorted({str(t.device) for t in self._data.values()})
        return (
            f"ModelUpdate({len(self._data)} tensors, {n} elements, device={','.join(devices) or 'none'}, "
            f"skipped={len(self._skipped)}, aliases={len(self._aliases)})"
        )


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def model_update(model: ModelLike, reference: ModelLike) -> ModelUpdate:
    """The update ``model - reference`` of the floating-point entries, for the codec.

    Parameters
    ----------
    model : torch.nn.Module or Mapping[str, torch.Tensor]
        The trained model (a client's local model), or its ``state_dict``.
    reference : torch.nn.Module or Mapping[str, torch.Tensor]
        The model it started from (the global model of the round). It must hold every
        floating, non-alias entry of ``model`` with the same shape, and no entry that
        ``model`` lacks; alias and skipped entries of ``model`` are not read from it. It
        may live on another device (its tensors are moved to the model's).

    Returns
    -------
    ModelUpdate
        ``Mapping[str, torch.Tensor]`` in ``state_dict`` order: ``model[k] - reference[k]``
        for every floating, non-empty, non-alias entry ``k``; detached, contiguous, on
        ``model[k]``'s device; float32, or float64 where ``model[k]`` is float64. float16
        and bfloat16 entries are upcast to float32 *before* subtracting, so the difference
        is not rounded to half precision. ``.skipped`` lists the entries left out,
        ``.aliases`` the tied names.

    Raises
    ------
    TypeError
        If ``model`` or ``reference`` is not a module or a mapping of tensors, or a
        reference entry needed is not floating point (naming it).
    ValueError
        If the names or shapes of ``model`` and ``reference`` do not match (naming the
        entry), or ``model`` has no non-empty floating-point entry.

    Examples
    --------
    >>> import torch, dprec.torch as dpt
    >>> ref = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.BatchNorm1d(2))
    >>> local = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.BatchNorm1d(2))
    >>> upd = dpt.model_update(local, ref)
    >>> list(upd), upd.skipped
    (['0.weight', '0.bias', '1.weight', '1.bias', '1.running_mean', '1.running_var'], ('1.num_batches_tracked',))
    """
    m = _entries(model, "model")
    ref = _state_dict(reference, "reference")
    extra = [k for k in ref if k not in m.sd]
    if extra:
        raise ValueError(f"reference has entries that model lacks: {extra}")
    if not m.kept:
        raise ValueError(f"model has no non-empty floating-point tensor to update (skipped: {m.skipped})")
    for k in m.kept:
        if k not in ref:
            raise ValueError(f"reference lacks the entry {k!r} of model")
        r = ref[k]
        if not r.is_floating_point():
            raise TypeError(f"reference[{k!r}] must be floating point like model[{k!r}], got dtype {r.dtype}")
        if r.shape != m.sd[k].shape:
            raise ValueError(
                f"reference[{k!r}] has shape {tuple(r.shape)} but model[{k!r}] has shape {tuple(m.sd[k].shape)}"
            )
    for k in list(m.aliases) + m.skipped:
        if k in ref and ref[k].shape != m.sd[k].shape:
            raise ValueError(
                f"reference[{k!r}] has shape {tuple(ref[k].shape)} but model[{k!r}] has shape {tuple(m.sd[k].shape)}"
            )
    data: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for k in m.kept:
            w = m.sd[k].detach()
            dt = _compute_dtype(w.dtype)
            r = ref[k].detach().to(device=w.device, dtype=dt)
            data[k] = (w.to(dt) - r).contiguous()
    return ModelUpdate(data, tuple(m.skipped), m.aliases)


def decode_template(model: ModelLike, device: str | torch.device | None = None) -> dict[str, torch.Tensor]:
    """A template for :meth:`DPRECCodec.decode` / :meth:`DPRECCodec.aggregate`.

    Holds the entries :func:`model_update` produces (floating, non-empty, de-aliased),
    with the same names, shapes and order. The codec reads only the names, shapes and
    device of a template, never its values: the model's own (detached) tensors are
    returned, not copies; only non-contiguous ones are copied to contiguous memory.

    Parameters
    ----------
    model : torch.nn.Module or Mapping[str, torch.Tensor]
        The (server's) model.
    device : str or torch.device, optional
        Move the template there. Where the template lives decides where the codec
        decodes: a CUDA template decodes on that GPU (into CUDA tensors), ``"cpu"`` on
        the host (into float32 CPU tensors). Default: the model's device.

    Returns
    -------
    dict of str to torch.Tensor

    Raises
    ------
    TypeError
        If ``model`` is not a module or a mapping of tensors, or ``device`` has the wrong type.
    ValueError
        If ``device`` is not a valid device, or the model has no floating-point entry.

    Examples
    --------
    >>> import torch, dprec.torch as dpt
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.BatchNorm1d(2))
    >>> {k: tuple(v.shape) for k, v in dpt.decode_template(net).items()}["0.weight"]
    (2, 4)
    """
    dev = _check_device(device)
    m = _entries(model, "model")
    if not m.kept:
        raise ValueError(f"model has no non-empty floating-point tensor (skipped: {m.skipped})")
    out: dict[str, torch.Tensor] = {}
    for k in m.kept:
        t = m.sd[k].detach()
        if dev is not None:
            t = t.to(dev)
        out[k] = t.contiguous()
    return out


def _update_tensor(value: Any, label: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        t = value.detach()
    elif isinstance(value, np.ndarray):
        try:
            t = torch.from_numpy(np.ascontiguousarray(value))
        except TypeError:
            raise TypeError(f"{label} has NumPy dtype {value.dtype}, which PyTorch does not support") from None
    else:
        raise TypeError(f"{label} must be a torch.Tensor or a numpy.ndarray, got {type(value).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{label} must be floating point, got dtype {t.dtype}")
    return t


def _check_scale(scale: Any) -> float:
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    s = float(scale)
    if not math.isfinite(s):
        raise ValueError(f"scale must be finite, got {scale!r}")
    return s


def apply_update(
    target: ModelLike,
    update: Mapping[str, Any],
    *,
    reference: ModelLike | None = None,
    scale: float = 1.0,
    strict: bool = True,
) -> ModelLike:
    """Add a (decoded, aggregated) update to a model, in place.

    For every name ``k`` in ``update``::

        target[k] <- (reference[k] if reference is not None else target[k]) + scale * update[k]

    computed in float32 (float64 for float64 entries; ``scale * update[k]`` is rounded to
    that dtype before the addition, and skipped when ``scale == 1``), then cast to
    ``target[k]``'s dtype and written with ``copy_`` under ``torch.no_grad()``, so
    parameters keep their identity (optimizers and hooks still see the same tensors).

    Parameters
    ----------
    target : torch.nn.Module or Mapping[str, torch.Tensor]
        The model to step (its tensors are modified in place), or a state dict of
        tensors (whose tensors are modified in place).
    update : Mapping[str, torch.Tensor or numpy.ndarray]
        Floating-point values shaped like the target's entries, e.g. the result of
        :meth:`DPRECCodec.aggregate` with a :func:`decode_template`. Tensors may be on any
        device; they are moved to the target entry's device.
    reference : torch.nn.Module or Mapping[str, torch.Tensor], optional
        Start from ``reference[k]`` instead of ``target[k]``. It must hold every updated
        name (or, for a tied name, its kept name) with the same shape.
    scale : float
        Factor on the update (a server learning rate), finite. Default 1.
    strict : bool
        When True (default), every floating, non-empty, non-alias entry of ``target``
        must be in ``update``; False updates only the entries present.

    Returns
    -------
    The ``target`` passed in.

    Notes
    -----
    Tied tensors are written once: an update may name a tied tensor by its kept name or
    by an alias, but not by both. Non-floating entries of ``target`` (e.g. BatchNorm's
    ``num_batches_tracked``) are never touched, also with ``reference``: carrying such
    buffers over from the reference is left to the caller. Everything is checked before
    the first write, so a ValueError or TypeError leaves ``target`` unchanged.

    Raises
    ------
    TypeError
        For a target or reference that is not a module or a mapping of tensors, update
        values that are neither tensors nor NumPy arrays or not floating point, an update
        naming a non-floating target entry, or a non-real ``scale``.
    ValueError
        For update names the target lacks, shape mismatches, an update naming a tied
        tensor twice, floating target entries missing from ``update`` (with ``strict``),
        entries missing from ``reference``, or a non-finite ``scale`` (naming them).

    Examples
    --------
    >>> import torch, dprec.torch as dpt
    >>> net = torch.nn.Linear(2, 1)
    >>> step = {k: torch.ones_like(v) for k, v in net.state_dict().items()}
    >>> before = net.bias.item()
    >>> _ = dpt.apply_update(net, step, scale=0.5)
    >>> round(net.bias.item() - before, 6)
    0.5
    """
    s = _check_scale(scale)
    if not isinstance(strict, (bool, np.bool_)):
        raise TypeError(f"strict must be a bool, got {type(strict).__name__}")
    tgt = _entries(target, "target")
    ref = None if reference is None else _state_dict(reference, "reference")
    if not isinstance(update, Mapping):
        raise TypeError(f"update must be a Mapping[str, tensor or array], got {type(update).__name__}")

    unknown = [k for k in update if k not in tgt.sd]
    if unknown:
        raise ValueError(f"update has entries that target lacks: {unknown}")
    plan: list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor | None]] = []  # (label, target, update, base)
    written: dict[str, str] = {}  # kept name -> the update name that writes it
    for k, v in update.items():
        if not isinstance(k, str):
            raise TypeError(f"update keys must be str, got {type(k).__name__} ({k!r})")
        t = tgt.sd[k]
        if not t.is_floating_point():
            raise TypeError(f"update[{k!r}] names target entry {k!r} of dtype {t.dtype}, which is not floating point")
        kept = tgt.aliases.get(k, k)
        if kept in written:
            raise ValueError(
                f"update names the tied tensor {kept!r} twice (as {written[kept]!r} and {k!r}); "
                "it would be updated twice"
            )
        written[kept] = k
        u = _update_tensor(v, f"update[{k!r}]")
        if u.shape != t.shape:
            raise ValueError(f"update[{k!r}] has shape {tuple(u.shape)} but target[{k!r}] has shape {tuple(t.shape)}")
        base = None
        if ref is not None:
            rname = kept if kept in ref else k
            if rname not in ref:
                raise ValueError(f"reference lacks the entry {k!r} of update")
            base = ref[rname]
            if not base.is_floating_point():
                raise TypeError(f"reference[{rname!r}] must be floating point, got dtype {base.dtype}")
            if base.shape != t.shape:
                raise ValueError(
                    f"reference[{rname!r}] has shape {tuple(base.shape)} but target[{k!r}] has shape {tuple(t.shape)}"
                )
        plan.append((k, t, u, base))
    if strict:
        missing = [k for k in tgt.kept if k not in written]
        if missing:
            raise ValueError(f"update lacks floating-point entries of target: {missing} (pass strict=False to allow)")

    with torch.no_grad():
        for _, t, u, base in plan:
            dt = _compute_dtype(t.dtype)
            start = (t if base is None else base).detach().to(device=t.device, dtype=dt)
            step = u.to(device=t.device, dtype=dt)
            if s != 1.0:
                step = step * s
            t.copy_(start + step)
    return target
