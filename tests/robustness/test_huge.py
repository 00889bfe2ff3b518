"""Opt-in checks at the issue's largest sizes (d = 2**31), too big for routine CI.

Run with ``DPREC_TEST_HUGE=1 python -m pytest tests/robustness/test_huge.py`` on a machine with at
least 16 GiB of free memory; they take about a minute on two cores.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import dprec
from dprec import rec
from tests.conftest import requires_native

pytestmark = [
    requires_native,
    pytest.mark.skipif(os.environ.get("DPREC_TEST_HUGE") != "1", reason="set DPREC_TEST_HUGE=1 (needs ~16 GiB)"),
]


def test_logits_at_d_2_pow_31():
    d = 1 << 31
    phi = np.ones(d, dtype=np.float32)
    got = rec.logits(phi, 0xC0FFEE, 7, 1, sigma=1.0, backend="cpu")
    # With phi = 1 the logit is the sum of the stream: recompute it chunk by chunk.
    chunk = 1 << 26
    for k in range(2):
        total = 0.0
        for i0 in range(0, d, chunk):
            total += float(dprec.philox.normals(0xC0FFEE, chunk, substream=k, group=7, offset=i0).sum(dtype=np.float64))
        assert abs(got[k] - total) <= 1e-9 * np.sqrt(d) * np.sqrt(d)


def test_candidate_tail_at_d_2_pow_31():
    d = 1 << 31
    z = rec.candidate(5, 1, 3, d, sigma=2.0, backend="cpu")
    tail = rec.candidate(5, 1, 3, 1000, sigma=2.0, backend="reference")  # head, via the reference
    assert np.array_equal(z[:1000], tail)
    end = dprec.philox.normals(5, 1000, substream=3, group=1, offset=d - 1000, backend="reference")
    assert np.array_equal(z[-1000:], np.float32(2.0) * end)
