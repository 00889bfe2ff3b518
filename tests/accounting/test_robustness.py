"""Issue 12, item 7: accounting parameters that size arrays are bounded (or cheap).

Before the fix ``sampled_gaussian_rdp(0.01, 1.0, [1e9])`` and ``qmgeo_pmf(0.5, 10**9, 0.5)``
ended in MemoryError after 16 s, ``dprec_epsilon(..., orders=np.arange(2, 10**6))`` ran for
over 400 s and ``joint_noise_calibrate(1e12, ...)`` for 27 s. Each must now raise a
ValueError naming the parameter at once (or finish quickly).
"""

from __future__ import annotations

import numpy as np
import pytest

from dprec import accounting
from dprec.accounting import _checks, discrete, joint_noise, qmgeo, rdp
from dprec.accounting._checks import MAX_INPUTS, MAX_LEVELS, MAX_ORDER, MAX_ORDERS

_DPREC = dict(rounds=10, clients_per_round=10, num_clients=1000, clip_multiplier=1.0, delta=1e-5, bits=None)


def test_limits_are_documented_and_generous():
    assert MAX_ORDER >= 10_000 and MAX_ORDERS >= 10_000 and MAX_LEVELS >= 1 << 16 and MAX_INPUTS >= 1024
    assert accounting.DEFAULT_ORDERS.max() <= MAX_ORDER and accounting.DPREC_DEFAULT_ORDERS.size <= MAX_ORDERS


def test_issue_examples():
    with pytest.raises(ValueError, match="^orders .*MAX_ORDER"):
        rdp.sampled_gaussian_rdp(0.01, 1.0, [1e9])
    with pytest.raises(ValueError, match="^levels .*MAX_LEVELS"):
        qmgeo.qmgeo_pmf(0.5, 10**9, 0.5)
    with pytest.raises(ValueError, match="^orders .*MAX_ORDERS"):
        accounting.dprec_epsilon(**_DPREC, orders=np.arange(2, 10**6))
    # joint_noise_calibrate(1e12, ...) took 27 s (an absolute brentq tolerance); now it is cheap.
    sigma = joint_noise.joint_noise_calibrate(1e12, 0.01, 1e-5)
    assert joint_noise.joint_noise_epsilon(sigma, 0.01, 1e-5)[0] <= 1e12


BIG_ORDER = [MAX_ORDER + 1.0]
MANY_ORDERS = np.arange(2.0, MAX_ORDERS + 3.0)

ORDER_CALLS = [
    ("sampled_gaussian_rdp", lambda o: rdp.sampled_gaussian_rdp(0.01, 1.0, o)),
    ("sampled_gaussian_rdp_without_replacement", lambda o: rdp.sampled_gaussian_rdp_without_replacement(10, 1000, 1.0, o)),
    ("rdp_to_epsilon", lambda o: rdp.rdp_to_epsilon(o, np.ones(np.size(o)), 1e-5)),
    ("dprec_epsilon", lambda o: accounting.dprec_epsilon(**_DPREC, orders=o)),
    ("dprec_epsilon_exact", lambda o: accounting.dprec_epsilon(**_DPREC, orders=o, reverse="exact")),
    ("dprec_delta", lambda o: accounting.dprec_delta(
        rounds=10, clients_per_round=10, num_clients=1000, clip_multiplier=1.0, epsilon=1.0, bits=None, orders=o)),
    ("dprec_local_epsilon", lambda o: accounting.dprec_local_epsilon(clip_multiplier=1.0, delta=1e-5, bits=None, orders=o)),
    ("dprec_forward_rdp", lambda o: accounting.dprec_forward_rdp(1.0, 0.01, o)),
    ("dprec_reverse_rdp", lambda o: accounting.dprec_reverse_rdp(1.0, 0.01, o)),
    ("DPRECRoundAccountant", lambda o: accounting.DPRECRoundAccountant(
        clip_multiplier=1.0, bits=None, num_clients=100, clients_per_round=10, delta=1e-5, orders=o)),
    ("Accountant", lambda o: accounting.Accountant(orders=o)),
    ("joint_noise_rdp", lambda o: joint_noise.joint_noise_rdp(o, 1.0, 0.01)),
    ("joint_noise_epsilon", lambda o: joint_noise.joint_noise_epsilon(1.0, 0.01, 1e-5, orders=o)),
    ("ddg_rdp", lambda o: discrete.ddg_rdp(o, l2_sensitivity=1.0, noise_stddev=4.0, num_clients=10, dim=100)),
    ("qmgeo_rdp", lambda o: qmgeo.qmgeo_rdp(o, 8, 0.5, sampling_rate=0.1, inputs=[-0.5, 0.5])),
    ("qmgeo_renyi_divergence", lambda o: qmgeo.qmgeo_renyi_divergence(o, 0.1, 0.2, 8, 0.5)),
]


@pytest.mark.parametrize("label,call", ORDER_CALLS, ids=[label for label, _ in ORDER_CALLS])
def test_orders_value_bounded(label, call):
    with pytest.raises(ValueError, match="^orders .*MAX_ORDER = "):
        call(BIG_ORDER)


@pytest.mark.parametrize("label,call", ORDER_CALLS, ids=[label for label, _ in ORDER_CALLS])
def test_orders_count_bounded(label, call):
    with pytest.raises(ValueError, match="^orders .*MAX_ORDERS = "):
        call(MANY_ORDERS)


def test_orders_count_checked_before_conversion():
    with pytest.raises(ValueError, match="^orders .*MAX_ORDERS"):
        _checks.check_orders(range(2, 10**12))  # converting it would need 8 TB


def test_orders_at_the_limits_are_accepted():
    out = rdp.sampled_gaussian_rdp(0.01, 1.0, [2.0, float(MAX_ORDER)])
    assert out.shape == (2,) and np.all(np.isfinite(out))


LEVEL_CALLS = [
    ("qmgeo_pmf", lambda r: qmgeo.qmgeo_pmf(0.5, r, 0.5)),
    ("qmgeo_log_pmf", lambda r: qmgeo.qmgeo_log_pmf(0.5, r, 0.5)),
    ("qmgeo_paper_eq20", lambda r: qmgeo.qmgeo_paper_eq20(r, 0.5)),
    ("qmgeo_paper_eq23", lambda r: qmgeo.qmgeo_paper_eq23(2.0, r, 0.5)),
    ("qmgeo_paper_eq25", lambda r: qmgeo.qmgeo_paper_eq25(2.0, r, 0.5)),
    ("qmgeo_paper_eq26", lambda r: qmgeo.qmgeo_paper_eq26(r, 0.5, 10, 0.1)),
    ("qmgeo_paper_eq27", lambda r: qmgeo.qmgeo_paper_eq27(2.0, r, 0.5, 10, 0.1)),
    ("qmgeo_renyi_divergence", lambda r: qmgeo.qmgeo_renyi_divergence([2.0], 0.1, 0.2, r, 0.5)),
    ("qmgeo_rdp", lambda r: qmgeo.qmgeo_rdp([2.0], r, 0.5, inputs=[-0.5, 0.5])),
    ("QMGeoEvent", lambda r: accounting.Accountant().compose(accounting.QMGeoEvent(levels=r, p=0.5, inputs=[0.0, 0.5]))),
]


@pytest.mark.parametrize("label,call", LEVEL_CALLS, ids=[label for label, _ in LEVEL_CALLS])
def test_levels_bounded(label, call):
    with pytest.raises(ValueError, match="levels must be <= MAX_LEVELS"):
        call(10**9)


def test_levels_at_the_limit_are_accepted():
    assert qmgeo.qmgeo_pmf(0.5, MAX_LEVELS, 0.5).shape == (MAX_LEVELS,)


def test_qmgeo_inputs_bounded():
    with pytest.raises(ValueError, match="^inputs .*MAX_INPUTS"):
        qmgeo.qmgeo_rdp([2.0], 8, 0.5, inputs=np.linspace(-1.0, 1.0, MAX_INPUTS + 1))


def test_ddg_tau_cost_does_not_grow_with_num_clients():
    # An array of num_clients terms before: 10**12 clients needed 8 TB.
    exact = discrete.ddg_tau(0.1, discrete._TAU_EXACT_TERMS + 1)
    bound = discrete.ddg_tau(0.1, discrete._TAU_EXACT_TERMS + 2)
    assert exact < bound <= exact * (1 + 1e-6)
    huge = discrete.ddg_tau(0.1, 10**12)
    assert np.isfinite(huge) and huge > bound
