"""A model update as named tensors: the containers every codec accepts, flattened and rebuilt.

An update (or a decode template) is one array, a sequence of arrays, or a flat mapping of
``str`` names to arrays. :func:`flatten` puts its tensors in the canonical order every wire
format uses (a mapping's names sorted, a sequence's positions ``"0"``, ``"1"``, ...),
:func:`leaf_arrays` reads them once through the array layer, and :func:`rebuild` gives results
back in the caller's container (PyTorch CPU tensors where the template held them).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..constants import MAX_STREAM_ELEMENTS
from . import arrays as _arrays
from .arrays import Array


@dataclass
class Tree:
    """A flattened update or template: leaves in canonical order."""

    kind: str  # "single", "mapping" or "sequence"
    container: Any  # type to rebuild (dict, OrderedDict, list, tuple) or None
    keys: list  # mapping: keys in the container's own iteration order
    names: tuple[str, ...]  # canonical order
    labels: list[str]  # canonical order: how errors name each tensor
    leaves: list  # canonical order: the original objects


def flatten(obj: Any, what: str) -> Tree:
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
        tree = Tree("mapping", container, keys, names, [f"{what}[{k!r}]" for k in names], leaves)
    elif isinstance(obj, (list, tuple)):
        if not obj:
            raise ValueError(f"{what} is empty (no tensors)")
        n = len(obj)
        tree = Tree(
            "sequence",
            tuple if isinstance(obj, tuple) else list,
            [],
            tuple(str(i) for i in range(n)),
            [f"{what}[{i}]" for i in range(n)],
            list(obj),
        )
    else:
        tree = Tree("single", None, [], ("",), [what], [obj])
    for label, leaf in zip(tree.labels, tree.leaves):
        if type(leaf) is np.ndarray:  # the common case, before the slower isinstance of an ABC
            continue
        if isinstance(leaf, (Mapping, list, tuple)):
            raise TypeError(
                f"{label} is a {type(leaf).__name__}; nested containers are not supported "
                "(pass a flat mapping of name -> array)"
            )
        if leaf is None or isinstance(leaf, (str, bytes)):
            raise TypeError(f"{label} must be an array or tensor, got {type(leaf).__name__}")
    return tree


def leaf_arrays(tree: Tree, what: str) -> tuple[list[Array], list[bool]]:
    """The leaves as :class:`Array` (read once, nothing converted) and which are PyTorch CPU
    tensors. Checks dtype and emptiness (not values), and that all leaves live on the host
    or all on the same GPU."""
    arrays, torch_flags = [], []
    for label, leaf in zip(tree.labels, tree.leaves):
        a = _arrays.read(leaf, label)
        if not _arrays.is_float_dtype(a.dtype):
            raise _arrays.float_dtype_error(label, a.dtype)
        if a.size == 0:
            raise ValueError(f"{label} must not be empty (shape {a.shape})")
        arrays.append(a)
        torch_flags.append(a.framework == "torch" and not a.on_gpu)
    _arrays.same_device(list(zip(tree.labels, arrays)), what)
    return arrays, torch_flags


# The dtypes the codec's kernels take as they are (native byte order).
KERNEL_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def plain_host_leaves(leaves: list[Any]) -> list[Array] | None:
    """The leaves as :class:`Array` when every one is a NumPy float32/float64 C-contiguous array
    of 1 .. ``MAX_STREAM_ELEMENTS`` elements, which :func:`leaf_arrays` and
    :func:`dprec._runtime.arrays.float_input` would pass through unchanged; None otherwise (take the
    general path). A small update's encode is short enough for their generality to show."""
    arrays = []
    for leaf in leaves:
        if type(leaf) is not np.ndarray:
            return None
        dtype = KERNEL_DTYPES.get(leaf.dtype)
        flags = leaf.flags
        if dtype is None or not flags.c_contiguous or not 0 < leaf.size <= MAX_STREAM_ELEMENTS:
            return None
        arrays.append(Array(leaf, leaf, 0, leaf.shape, dtype, _arrays.HOST, 0, "numpy", not flags.writeable))
    return arrays


def rebuild(tree: Tree, outs: list[Any], torch_flags: list[bool]) -> Any:
    """The container of ``tree`` holding ``outs`` (Arrays or host NumPy arrays, canonical order);
    host arrays become PyTorch CPU tensors where the template held them."""
    out: list[Any] = [o.result() if isinstance(o, Array) else o for o in outs]
    if any(torch_flags):
        import torch  # noqa: PLC0415 - optional, only when the template holds tensors

        out = [torch.from_numpy(a) if f else a for a, f in zip(out, torch_flags)]
    if tree.kind == "single":
        return out[0]
    if tree.kind == "sequence":
        return tree.container(out)
    by_name = dict(zip(tree.names, out))
    return tree.container((k, by_name[k]) for k in tree.keys)


def message_list(messages: Any, single: tuple[type, ...], what: str) -> list[Any]:
    """``messages`` as a non-empty list; TypeError for a single message (one of ``single``)."""
    if isinstance(messages, (*single, bytes, bytearray, memoryview, str)):
        raise TypeError(f"messages must be a sequence of {what}, got a single {type(messages).__name__}")
    try:
        messages = list(messages)
    except TypeError:
        raise TypeError(f"messages must be a sequence of {what}, got {type(messages).__name__}") from None
    if not messages:
        raise ValueError("messages is empty")
    return messages


def check_weights(weights: Any, n: int, largest: float) -> np.ndarray:
    """Aggregation weights as float64, shape ``(n,)``, default ``1/n`` each; ``largest`` bounds
    the magnitude of one decoded value, so that ``sum |weights| * largest`` must stay within the
    float32 range (ValueError naming ``weights`` otherwise: the float32 sum could overflow)."""
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
        bound = float(np.sum(np.abs(w))) * largest
    if not bound <= float(np.finfo(np.float32).max):
        raise ValueError(
            f"weights too large for float32 output: sum |weights| times the largest decoded magnitude "
            f"({largest:.6g}) = {bound:.6g} exceeds the float32 maximum, so the sum could overflow"
        )
    return w


# --------------------------------------------------------------------------------------
# Codec
# --------------------------------------------------------------------------------------
