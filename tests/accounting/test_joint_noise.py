"""Joint noise scaling (Heikkila et al.): Table 1 reproduced, sigma_total algebra, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprec.accounting.joint_noise import (
    client_sigma_for_total,
    joint_noise_calibrate,
    joint_noise_epsilon,
    joint_noise_rdp,
    sigma_total,
    sigma_total_equal,
)
from dprec.accounting.rdp import rdp_to_epsilon, sampled_gaussian_rdp

Q, DELTA, TARGET = 0.1, 1e-5, 5.0

# The paper's Table 1: (local steps, parties) -> (sigma_total, eps of the averaged model).
# "1 epoch" at Poisson rate 0.1 is 1/q = 10 steps, "5 epochs" 50 steps (docs/accounting.md).
TABLE_1 = {
    1: {1: (0.69, 5.0), 2: (0.98, 2.78), 5: (1.54, 1.22), 10: (2.18, 0.64)},
    10: {1: (0.90, 5.0), 2: (1.28, 2.61), 5: (2.02, 1.19), 10: (2.85, 0.72)},
    50: {1: (1.18, 5.0), 2: (1.67, 2.85), 5: (2.64, 1.55), 10: (3.73, 1.03)},
}


@pytest.fixture(scope="module")
def calibrated():
    """sigma_LDP for each local-step count: each local model is (5, 1e-5)-DP."""
    return {steps: joint_noise_calibrate(TARGET, Q, DELTA, local_steps=steps) for steps in TABLE_1}


@pytest.mark.parametrize("steps", sorted(TABLE_1))
@pytest.mark.parametrize("parties", [1, 2, 5, 10])
def test_table_1_every_row(calibrated, steps, parties):
    want_sigma, want_eps = TABLE_1[steps][parties]
    total = sigma_total_equal(calibrated[steps], parties)
    eps, _ = joint_noise_epsilon(total, Q, DELTA, local_steps=steps)
    assert abs(eps - want_eps) <= 0.01, (steps, parties, eps, want_eps)
    # The printed sigma_total is the calibrated one, rounded to two decimals.
    assert abs(total - want_sigma) <= 0.005 + 1e-9, (steps, parties, total, want_sigma)


def test_calibration_hits_target_from_above(calibrated):
    for steps, sigma in calibrated.items():
        eps, _ = joint_noise_epsilon(sigma, Q, DELTA, local_steps=steps)
        assert eps <= TARGET and eps > TARGET - 1e-6
        eps_less_noise, _ = joint_noise_epsilon(sigma * (1 - 1e-4), Q, DELTA, local_steps=steps)
        assert eps_less_noise > TARGET


def test_composition_is_steps_times_rounds_sampled_gaussian_steps():
    orders = np.arange(2.0, 65.0)
    one = sampled_gaussian_rdp(0.05, 1.3, orders)
    np.testing.assert_allclose(joint_noise_rdp(orders, 1.3, 0.05, local_steps=4, rounds=7), 28 * one, rtol=1e-15)
    # S steps x T rounds is the same as S*T rounds of one step.
    eps_a = joint_noise_epsilon(1.3, 0.05, 1e-6, local_steps=4, rounds=7)
    eps_b = joint_noise_epsilon(1.3, 0.05, 1e-6, local_steps=1, rounds=28)
    assert eps_a == eps_b
    assert eps_a == rdp_to_epsilon(
        np.arange(2.0, 257.0), 28 * sampled_gaussian_rdp(0.05, 1.3, np.arange(2.0, 257.0)), 1e-6
    )


def test_epsilon_matches_dp_accounting_with_same_orders():
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event, rdp

    orders = list(range(2, 257))
    acc = rdp.RdpAccountant(orders=orders)
    acc.compose(dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(1.1)), 30)
    # dp_accounting converts with Balle et al.'s formula.
    ours, _ = joint_noise_epsilon(1.1, 0.1, 1e-5, local_steps=3, rounds=10, method="balle")
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert dp_accounting is not None


def test_sigma_total_forms():
    assert sigma_total([3.0, 4.0]) == pytest.approx(5.0)
    # honest-but-curious drops the largest share (worst case over which client is curious)
    assert sigma_total([3.0, 4.0, 12.0], honest_but_curious=True) == pytest.approx(5.0)
    assert sigma_total_equal(0.69, 10) == pytest.approx(0.69 * math.sqrt(10))
    assert sigma_total_equal(0.69, 10, honest_but_curious=True) == pytest.approx(0.69 * 3.0)
    assert sigma_total([0.7] * 6, honest_but_curious=True) == pytest.approx(
        sigma_total_equal(0.7, 6, honest_but_curious=True)
    )
    for hbc in (False, True):
        share = client_sigma_for_total(2.5, 7, honest_but_curious=hbc)
        assert sigma_total_equal(share, 7, honest_but_curious=hbc) == pytest.approx(2.5)


def test_honest_but_curious_costs_privacy():
    plain = joint_noise_epsilon(sigma_total_equal(0.8, 5), Q, DELTA, local_steps=10)[0]
    hbc = joint_noise_epsilon(sigma_total_equal(0.8, 5, honest_but_curious=True), Q, DELTA, local_steps=10)[0]
    assert hbc > plain


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: joint_noise_epsilon(1.0, 0.1, 0.0), "delta"),
        (lambda: joint_noise_epsilon(1.0, 0.1, 1.0), "delta"),
        (lambda: joint_noise_epsilon(-1.0, 0.1, 1e-5), "noise_multiplier"),
        (lambda: joint_noise_epsilon(1.0, 0.0, 1e-5), "sampling_rate"),
        (lambda: joint_noise_epsilon(1.0, 1.5, 1e-5), "sampling_rate"),
        (lambda: joint_noise_epsilon(1.0, float("nan"), 1e-5), "sampling_rate"),
        (lambda: joint_noise_rdp([2.0], 1.0, -0.1), "sampling_rate"),
        (lambda: joint_noise_rdp([2.0], -1.0, 0.1), "noise_multiplier"),
        (lambda: joint_noise_epsilon(1.0, 0.1, 1e-5, local_steps=0), "local_steps"),
        (lambda: joint_noise_epsilon(1.0, 0.1, 1e-5, rounds=0), "rounds"),
        (lambda: joint_noise_epsilon(1.0, 0.1, 1e-5, orders=[0.5, 2.0]), "orders"),
        (lambda: joint_noise_epsilon(1.0, 0.1, 1e-5, method="magic"), "method"),
        (lambda: joint_noise_calibrate(-1.0, 0.1, 1e-5), "target_epsilon"),
        (lambda: joint_noise_calibrate(0.0, 0.1, 1e-5), "target_epsilon"),
        (lambda: joint_noise_calibrate(1.0, 2.0, 1e-5), "sampling_rate"),
        (lambda: sigma_total([1.0, -1.0]), "client_sigmas"),
        (lambda: sigma_total([]), "client_sigmas"),
        (lambda: sigma_total([1.0, float("nan")]), "client_sigmas"),
        (lambda: sigma_total([1.0], honest_but_curious=True), "client_sigmas"),
        (lambda: sigma_total_equal(-0.5, 3), "client_sigma"),
        (lambda: sigma_total_equal(0.5, 0), "num_clients"),
        (lambda: sigma_total_equal(0.5, 1, honest_but_curious=True), "num_clients"),
        (lambda: client_sigma_for_total(-1.0, 3), "total_sigma"),
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_wrong_types():
    with pytest.raises(TypeError, match="local_steps"):
        joint_noise_epsilon(1.0, 0.1, 1e-5, local_steps=1.5)
    with pytest.raises(TypeError, match="honest_but_curious"):
        sigma_total([1.0, 2.0], honest_but_curious="yes")
