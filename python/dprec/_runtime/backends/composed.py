"""Group sampling composed from a backend's own kernels, for the backends that have no fused
one (:mod:`.reference` and :mod:`.cuda`; the CPU backend does it in one native call)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...reference.rec import gumbel_from_words

if TYPE_CHECKING:
    from ..array_view import Array


class ComposedGroupSampling:
    """:meth:`gumbel_argmax_words` and :meth:`sample_groups` of :class:`dprec._runtime.backends.Kernels`
    from the class's ``gumbel_argmax`` and ``dot_products_groups``. The private noise is made on
    the host with NumPy (:func:`dprec.reference.rec.gumbel_from_words`) and handed to
    ``gumbel_argmax`` (which uploads it where the logits live on a GPU)."""

    if TYPE_CHECKING:

        @staticmethod
        def gumbel_argmax(logits: Array, noise: np.ndarray, offsets: np.ndarray) -> np.ndarray: ...

        @staticmethod
        def dot_products_groups(
            phis: list[Array], seed: int, groups: np.ndarray, offsets: np.ndarray, factors: np.ndarray, out: Array
        ) -> None: ...

    @classmethod
    def gumbel_argmax_words(cls, logits: Array, words: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return cls.gumbel_argmax(logits, gumbel_from_words(words), offsets)

    @classmethod
    def sample_groups(
        cls, phis: list[Array], seed: int, groups: np.ndarray, offsets: np.ndarray, factors: np.ndarray,
        words: np.ndarray, logits: Array
    ) -> np.ndarray:
        cls.dot_products_groups(phis, seed, groups, offsets, factors, logits)
        return cls.gumbel_argmax_words(logits, words, offsets)
