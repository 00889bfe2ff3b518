"""The distributed-DP pipelines of Chen et al. (Algorithms 1, 2 and 6): DDG and Skellam.

A round of federated mean estimation under secure aggregation (SecAgg) with distributed noise:

client (:meth:`DistributedPipeline.encode`)
    clip to L2 norm ``clip``; optionally count-sketch to ``rows x cols`` (Chen et al., Algorithm 2)
    and re-clip the sketch; randomized Hadamard rotation (zero-padded to a power of two);
    scale by ``1/gamma``; conditional randomized rounding (Kairouz et al. 2021); add discrete
    noise (discrete Gaussian or Skellam) in the integer domain; reduce mod ``M = 2**bits``.
SecAgg (:meth:`DistributedPipeline.aggregate`)
    the modular sum of the clients' vectors: all the server ever sees.
server (:meth:`DistributedPipeline.decode`)
    centered lift to ``[-M/2, M/2)``, rescale by ``gamma``, inverse rotation, unsketch, divide
    by the number of clients.

The rotation and the sketch come from the round's **shared** seed (the server needs them); the
rounding uniforms and the noise come from a **client-private** seed (OS entropy unless the
caller passes a NumPy Generator; see *Randomness contract and wire formats* in the docs).

Parameters are chosen like TensorFlow Federated's ``DistributedDpSumFactory``, but written down
(see :class:`DistributedPipeline`): the scale ``1/gamma`` is the largest for which ``k`` standard
deviations of an aggregate coordinate fit in ``[-M/2, M/2)``, with ``k`` from the per-coordinate
wrap probability asked for; when the noise is calibrated to a target epsilon, ``gamma`` and the
noise are solved together (the sensitivity after rounding depends on ``gamma``), and the noise
is always the one :mod:`dprec.accounting.discrete` certifies for the ``gamma`` actually used.

Threat model: the server (and anyone else) sees only the modular sum, so the accounted guarantee
(:meth:`DistributedPipeline.epsilon`, :meth:`DistributedPipeline.guarantee`) holds against the
``"server"`` (their default ``threat_model``), and so against ``"messages"`` and ``"central"``
observers, for ``relation="zero"`` (the default: one client's update replaced by a zero update,
every client still adding its noise share); a calibration to ``target_epsilon`` therefore holds for
all of them. ``relation="add_remove"`` is ``inf``: removing a client also removes its noise share.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Optional

import numpy as np
from scipy.special import erfcinv

from .._runtime import arrays as _arrays
from .._runtime.validation import check_int, check_positive, check_real, check_seed
from ..accounting import discrete as _acct
from ..transforms.hadamard import RandomizedHadamard
from ..transforms.sketch import CountSketch
from . import modular, noise, rounding

__all__ = ["DistributedPipeline", "DDGPipeline", "SkellamPipeline", "MAX_INTEGER_NOISE_STDDEV"]

#: Most per-client noise standard deviation, in integer units, the pipelines ask of the
#: samplers (:data:`dprec.secagg.noise.MAX_DISCRETE_GAUSSIAN_SIGMA`). Beyond it a larger scale
#: buys nothing: the rounding error is already below ``2**-48`` of the noise variance, so wide
#: moduli leave head-room instead of scaling further.
MAX_INTEGER_NOISE_STDDEV = float(2**24)
_TINY = float(np.finfo(np.float64).tiny)


def _check_real(value: Any, name: str, upper: float = math.inf) -> float:
    """A real number in ``[0, upper)`` (finite)."""
    v = check_real(value, name)
    if not (0.0 <= v < upper and math.isfinite(v)):
        raise ValueError(f"{name} must be in [0, {upper}), got {value!r}")
    return v


def _discrete_gaussian_variance(sigma: float) -> float:
    """Exact variance of N_Z(0, sigma^2) (below sigma^2 for small sigma; equal to ~1e-80 above 3)."""
    if sigma >= 3.0:
        return sigma * sigma
    y = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41, dtype=np.float64)
    w = np.exp(-y * y / (2.0 * sigma * sigma))
    return float(np.sum(w * y * y) / np.sum(w))


def _to_host_float64(x: Any, name: str) -> np.ndarray:
    """The client's vector as a float64 NumPy array (GPU arrays are copied: the client side runs on the host)."""
    a = _arrays.read(x, name)
    if a.on_gpu:
        obj = a.obj
        if hasattr(obj, "detach"):  # PyTorch
            obj = obj.detach().cpu()
        elif hasattr(obj, "get"):  # CuPy
            obj = obj.get()
        else:
            raise TypeError(f"{name} is a GPU array of an unsupported kind; pass a NumPy array, a PyTorch tensor or a CuPy array")
        a = _arrays.read(obj, name)
    src = _arrays.float_input(a, name)
    return np.array(src.result(), dtype=np.float64, copy=True).reshape(-1)


class DistributedPipeline:
    """One round's distributed-DP SecAgg pipeline (base of :class:`DDGPipeline` and :class:`SkellamPipeline`).

    Parameters
    ----------
    dim : int
        d, the length of each client's update.
    clip : float
        c > 0, the L2 norm each client's update is clipped to.
    bits : int
        SecAgg word size: values live mod ``M = 2**bits``, ``2 <= bits <= 64`` (uint32 words up to
        32 bits, uint64 above).
    num_clients : int
        n, the noise shares summed in a round (and the clients' vectors, without sampling). With
        ``sampling_rate < 1`` the accounting holds only if EVERY round's sum carries exactly n noise
        shares whoever is drawn: idle clients top up with a share on a zero vector
        (``encode(zeros)``), drawn clients beyond n send without one (``encode(x, add_noise=False)``),
        and the server decodes by n (:meth:`decode` refuses another count then). The scale's head-room
        is sized for n vectors: rounds with more drawn clients wrap somewhat more often (accuracy only).
    seed : int
        The round's shared 64-bit seed (rotation signs, sketch hashes). Known to the server.
    noise_stddev : float, optional
        sigma, each client's noise standard deviation in the units of the update (the client adds
        ``gamma * noise`` with integer noise of standard deviation ``sigma / gamma``). Give this or
        ``target_epsilon``.
    target_epsilon : float, optional
        Calibrate ``noise_stddev`` so that the mechanism (``steps`` rounds, Poisson ``sampling_rate``)
        is ``(target_epsilon, delta)``-DP by :mod:`dprec.accounting.discrete`. Needs ``delta``.
    delta : float, optional
        The delta of the reported / targeted epsilon.
    steps : int
        Rounds composed in the accounting (default 1).
    sampling_rate : float
        Poisson sampling rate of the accounting (default 1: every client every round).
    sketch : (int, int), optional
        ``(rows, cols)``: count-sketch the update first (Chen et al., Algorithm 2); the message then
        has ``rows * cols`` coordinates (padded to a power of two by the rotation).
    sketch_slack : float
        The sketched update is re-clipped to ``clip * sqrt((1 + sketch_slack) / rows)`` (a
        count-sketch with the 1/rows normalisation shrinks norms by ``sqrt(rows)`` on average; the
        re-clip makes the sensitivity exact whatever the hashes). Default 0.1, the 1.1 of Chen et
        al.'s Appendix F.
    beta : float
        Conditional rounding bias, in [0, 1); default ``exp(-0.5)`` (Kairouz et al.; Chen et al.,
        Appendix B). 0 means unconditional rounding.
    wrap_probability : float
        Target probability that one coordinate of the aggregate leaves ``[-M/2, M/2)``, under a
        Gaussian approximation of the aggregate; sets ``k = sqrt(2) erfcinv(wrap_probability)``
        standard deviations of head-room (default 1e-6: about 4.9).
    group : int
        Philox group id of the rotation and sketch (e.g. the tensor number), default 0.
    granularity : float, optional
        gamma itself, instead of the largest scale with ``k`` standard deviations of head-room: what a
        client is told by a server that chose the scale (with ``noise_stddev``; a Flower client rebuilds
        the server's pipeline this way, so that both use the same float, whatever their libraries
        compute). Positive and finite; the head-room (:attr:`wrap_probability`) then follows from it.
    threat_model : {"server", "messages", "central"}
        Whom ``target_epsilon`` is calibrated against, and the default of :meth:`epsilon` /
        :meth:`guarantee` (default ``"server"``). With ``sampling_rate < 1`` only ``"central"`` (the
        client sample hidden from the observer) gets Poisson amplification: the server sees who sent
        a masked message, so ``"server"`` and ``"messages"`` compose the participation mixture of the
        unsampled round (:func:`dprec.accounting.rdp.participation_rdp`), which needs more noise.

    Notes
    -----
    **The scale.** With ``s = 1/gamma``, an aggregate coordinate (integer units) is the sum of
    n rotated, scaled updates, n rounding errors and n noise shares. Its variance is at most
    ``v(s) = s^2 (n^2 c'^2 / p + n sigma^2) + n / 4``: ``p`` the padded dimension, ``c'`` the clip
    of the rotated vector (after a sketch, the re-clip); the first term is the worst case of n
    aligned updates spread evenly by the rotation, the last bounds the rounding variances. The
    pipeline takes the largest ``s`` with ``k sqrt(v(s)) <= M/2``, capped so that the integer noise
    standard deviation ``s sigma`` stays within :data:`MAX_INTEGER_NOISE_STDDEV`. When
    ``(M/(2k))^2 <= n/4`` no scale exists (rounding alone would wrap): a ValueError names
    ``bits``. TFF computes the same kind of scale but omits the rounding term, which is what goes
    wrong at small bit widths.

    **Calibration.** Given ``target_epsilon``, ``sigma(gamma)`` (the smallest noise the accounting
    certifies for the sensitivity after rounding at ``gamma``) and ``gamma(sigma)`` (the scale
    above) are iterated to a fixed point; the final noise is ``sigma(gamma)`` for the final
    ``gamma``, so the privacy claim holds exactly for the parameters used.
    """

    mechanism: str = ""

    def __init__(
        self,
        dim: int,
        *,
        clip: float,
        bits: int,
        num_clients: int,
        seed: int,
        noise_stddev: Optional[float] = None,
        target_epsilon: Optional[float] = None,
        delta: Optional[float] = None,
        steps: int = 1,
        sampling_rate: float = 1.0,
        sketch: Optional[tuple[int, int]] = None,
        sketch_slack: float = 0.1,
        beta: float = math.exp(-0.5),
        wrap_probability: float = 1e-6,
        group: int = 0,
        threat_model: str = "server",
        granularity: Optional[float] = None,
    ) -> None:
        from ..accounting.guarantee import check_threat_model  # noqa: PLC0415

        self._threat_model = check_threat_model(threat_model)
        self._dim = check_int(dim, "dim", 1, 1 << 34)
        self._clip = check_positive(clip, "clip")
        self._bits = check_int(bits, "bits", 2, 64)
        self._n = check_int(num_clients, "num_clients", 1, 1 << 40)
        check_seed(seed)
        self._steps = check_int(steps, "steps", 1, 1 << 40)
        self._sampling_rate = check_positive(sampling_rate, "sampling_rate")
        if self._sampling_rate > 1.0:
            raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
        self._beta = _check_real(beta, "beta", upper=1.0)
        p = check_positive(wrap_probability, "wrap_probability")
        if p >= 1.0:
            raise ValueError(f"wrap_probability must be in (0, 1), got {wrap_probability!r}")
        self._k = float(math.sqrt(2.0) * erfcinv(p))
        self._sketch: Optional[CountSketch] = None
        self._sketch_slack = 0.0
        message_dim = self._dim
        self._sensitive_clip = self._clip
        if sketch is not None:
            if not (isinstance(sketch, (tuple, list)) and len(sketch) == 2):
                raise TypeError(f"sketch must be a (rows, cols) pair or None, got {sketch!r}")
            slack = self._sketch_slack = _check_real(sketch_slack, "sketch_slack")
            self._sketch = CountSketch(self._dim, sketch[0], sketch[1], seed, group)
            message_dim = self._sketch.rows * self._sketch.cols
            self._sensitive_clip = self._clip * math.sqrt((1.0 + slack) / self._sketch.rows)
        self._rotation = RandomizedHadamard(message_dim, seed, group=group)
        self._delta = None if delta is None else check_positive(delta, "delta")
        if self._delta is not None and self._delta >= 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")

        if (noise_stddev is None) == (target_epsilon is None):
            raise ValueError("give exactly one of noise_stddev and target_epsilon")
        if granularity is not None:
            if target_epsilon is not None:
                raise ValueError("granularity is given with noise_stddev, not with target_epsilon")
            self._sigma = check_positive(noise_stddev, "noise_stddev")
            self._gamma = check_positive(granularity, "granularity")
            if not (math.isfinite(self._gamma) and math.isfinite(1.0 / self._gamma)):
                raise ValueError(f"granularity must be finite with a finite inverse, got {granularity!r}")
        elif target_epsilon is not None:
            if self._delta is None:
                raise ValueError("target_epsilon needs delta")
            target = check_positive(target_epsilon, "target_epsilon")
            self._sigma, self._gamma = self._calibrate(target)
        else:
            self._sigma = check_positive(noise_stddev, "noise_stddev")
            self._gamma = 1.0 / self._scale_for(self._sigma)
        v = self.integer_noise_stddev
        if not v * v >= _TINY:  # the samplers take the variance: it must be a normal float64
            raise ValueError(
                f"noise_stddev = {self._sigma!r} is too small for clip = {self._clip!r}: each client's integer "
                f"noise standard deviation ({v!r}) squared underflows float64"
            )

    # ---- parameters ----------------------------------------------------------------------

    def _scale_for(self, sigma: float) -> float:
        """The largest scale ``s = 1/gamma`` with ``k`` standard deviations inside ``[-M/2, M/2)``."""
        n, p = float(self._n), float(self.padded_dim)
        budget = (2.0 ** (self._bits - 1) / self._k) ** 2 - n / 4.0
        if budget <= 0.0:
            need = math.ceil(math.log2(self._k * math.sqrt(n))) + 2
            raise ValueError(
                f"bits={self._bits} is too few for num_clients={self._n}: the rounding errors alone would wrap "
                f"around M = 2**{self._bits} (at {self._k:.2f} standard deviations); use bits >= {need}"
            )
        c = self._sensitive_clip
        per_unit = (n * c) * (n * c) / p + n * sigma * sigma  # products, not **: they overflow to inf, not raise
        if not (0.0 < per_unit < math.inf):
            s = 0.0 if per_unit == math.inf else math.inf
        else:
            s = min(math.sqrt(budget / per_unit), MAX_INTEGER_NOISE_STDDEV / sigma)
        if not (s > 0.0 and math.isfinite(s) and math.isfinite(1.0 / s)):
            # (n c)^2 or n sigma^2 overflows float64, or the scale underflows: no integer grid exists.
            raise ValueError(
                f"clip = {self._clip!r} and noise_stddev = {sigma!r} are out of range for bits = {self._bits} and "
                f"num_clients = {self._n}: the scale onto the integers under- or overflows (measure the update in "
                "other units)"
            )
        return s

    def _accounted_epsilon(self, sigma: float, gamma: float) -> float:
        assert self._delta is not None
        return self._epsilon_function()(
            l2_sensitivity=self._l2_sensitivity(gamma),
            noise_stddev=sigma,
            num_clients=self._n,
            dim=self.padded_dim,
            delta=self._delta,
            steps=self._steps,
            sampling_rate=self._sampling_rate,
            granularity=gamma,
            threat_model=self._threat_model,
        )[0]

    def _noise_for(self, target: float, gamma: float) -> float:
        return self._calibration_function()(
            target,
            l2_sensitivity=self._l2_sensitivity(gamma),
            num_clients=self._n,
            dim=self.padded_dim,
            delta=self._delta,
            steps=self._steps,
            sampling_rate=self._sampling_rate,
            granularity=gamma,
            threat_model=self._threat_model,
        )

    def _calibrate(self, target: float) -> tuple[float, float]:
        # Start from a grid far finer than any scale can reach (rounding nearly free), then
        # alternate: the noise for this gamma, the gamma for this noise. Both maps increase, so
        # the iteration climbs monotonically to the fixed point.
        gamma = self._sensitive_clip * 1e-12
        sigma = self._noise_for(target, gamma)
        for _ in range(100):
            new_gamma = 1.0 / self._scale_for(sigma)
            sigma = self._noise_for(target, new_gamma)
            done = abs(new_gamma - gamma) <= 1e-9 * new_gamma
            gamma = new_gamma
            if done:
                break
        return sigma, gamma

    def _l2_sensitivity(self, gamma: float) -> float:
        return _acct.rounded_l2_sensitivity(self._sensitive_clip, self.padded_dim, gamma, self._beta)

    def _epsilon_function(self) -> Any:
        raise NotImplementedError

    def _calibration_function(self) -> Any:
        raise NotImplementedError

    def _sample_noise(self, n: int, rng: Optional[np.random.Generator]) -> np.ndarray:
        raise NotImplementedError

    def _noise_variance(self) -> float:
        """Variance of one client's integer noise share."""
        raise NotImplementedError

    @property
    def dim(self) -> int:
        """d, the length of an update."""
        return self._dim

    @property
    def clip(self) -> float:
        return self._clip

    @property
    def bits(self) -> int:
        """log2 of the SecAgg modulus M."""
        return self._bits

    @property
    def modulus(self) -> int:
        return 1 << self._bits

    @property
    def num_clients(self) -> int:
        return self._n

    @property
    def sketch(self) -> Optional[CountSketch]:
        return self._sketch

    @property
    def sketch_slack(self) -> float:
        """The sketch's re-clip slack (0 without a sketch)."""
        return self._sketch_slack

    @property
    def beta(self) -> float:
        """The conditional-rounding bias (0: unconditional rounding)."""
        return self._beta

    @property
    def rotation(self) -> RandomizedHadamard:
        return self._rotation

    @property
    def padded_dim(self) -> int:
        """Coordinates of a message: the (sketched) dimension padded to a power of two."""
        return self._rotation.padded_dim

    @property
    def message_dtype(self) -> np.dtype:
        return modular.storage_dtype(self._bits)

    @property
    def bits_per_client(self) -> int:
        """What each client sends per round: ``padded_dim * bits``."""
        return self.padded_dim * self._bits

    @property
    def bits_per_parameter(self) -> float:
        return self.bits_per_client / self._dim

    @property
    def noise_stddev(self) -> float:
        """sigma, each client's noise standard deviation in the update's units."""
        return self._sigma

    @property
    def granularity(self) -> float:
        """gamma, the rounding grid (update units per integer step)."""
        return self._gamma

    @property
    def scale(self) -> float:
        """1 / gamma."""
        return 1.0 / self._gamma

    @property
    def integer_noise_stddev(self) -> float:
        """sigma / gamma: the noise parameter of each client's integer noise share."""
        return self._sigma / self._gamma

    @property
    def sensitivity_clip(self) -> float:
        """The L2 norm bound of the rotated vector: ``clip``, or the sketch's re-clip."""
        return self._sensitive_clip

    @property
    def l2_sensitivity(self) -> float:
        """Delta2 after conditional rounding (Chen et al. Theorem E.1), in update units."""
        return self._l2_sensitivity(self._gamma)

    @property
    def rounding_norm_bound(self) -> float:
        """The conditional-rounding bound on the rounded vector's norm, in integer units."""
        return self._l2_sensitivity(self._gamma) / self._gamma

    @property
    def stddevs_of_headroom(self) -> float:
        """k: aggregate standard deviations (worst case) between 0 and M/2."""
        return self._k

    def aggregate_stddev(self) -> float:
        """The worst-case standard deviation of one aggregate coordinate, in integer units."""
        s, n = self.scale, float(self._n)
        return math.sqrt(s * s * (n * self._sensitive_clip) ** 2 / self.padded_dim + n * self._noise_variance() + n / 4)

    @property
    def wrap_probability(self) -> float:
        """Probability that a given aggregate coordinate wraps around M (Gaussian approximation)."""
        return float(math.erfc(2.0 ** (self._bits - 1) / self.aggregate_stddev() / math.sqrt(2.0)))

    @property
    def any_wrap_probability(self) -> float:
        """Union bound over the ``padded_dim`` coordinates of :attr:`wrap_probability`."""
        return min(1.0, self.padded_dim * self.wrap_probability)

    def _guarantee_delta(self, delta: Optional[float]) -> float:
        d = self._delta if delta is None else check_positive(delta, "delta")
        if d is None:
            raise ValueError("epsilon needs delta (pass delta here or to the pipeline)")
        return d

    @property
    def threat_model(self) -> str:
        """Whom the calibration (``target_epsilon``) targets; the default of :meth:`epsilon` and :meth:`guarantee`."""
        return self._threat_model

    def epsilon(
        self, delta: Optional[float] = None, *, threat_model: Optional[str] = None, relation: str = "zero"
    ) -> float:
        """The accounted epsilon at ``delta`` (default: the pipeline's delta) against ``threat_model``.

        Secure aggregation reveals only the modular sum of the clients' noisy vectors, to every
        observer, so the guarantee is finite for ``relation="zero"`` (the default: one client's
        update replaced by a zero update, every client still adding its noise share) against every
        ``threat_model`` (default: the pipeline's, :attr:`threat_model`). Without client sampling the
        number is the same for all three; with ``sampling_rate < 1`` only ``"central"`` is amplified
        (the server sees who sent a masked message: ``"server"`` and ``"messages"`` get the
        participation mixture of the unsampled round). ``relation="add_remove"`` gives
        ``inf``: removing a client also removes its share of the noise (see :meth:`guarantee`'s
        ``reasons``). Both are validated (ValueError naming the argument and the valid choices).
        """
        from ..accounting.guarantee import check_relation, check_threat_model  # noqa: PLC0415

        tm = self._threat_model if threat_model is None else check_threat_model(threat_model)
        if check_relation(relation) == "add_remove":
            return math.inf
        d = self._guarantee_delta(delta)
        saved, saved_tm = self._delta, self._threat_model
        self._delta, self._threat_model = d, tm
        try:
            return self._accounted_epsilon(self._sigma, self._gamma)
        finally:
            self._delta, self._threat_model = saved, saved_tm

    def guarantee(
        self,
        delta: Optional[float] = None,
        *,
        threat_model: Optional[str] = None,
        relation: str = "zero",
        conversion: str = "rdp-mironov",
    ) -> Any:
        """The :class:`dprec.accounting.PrivacyGuarantee` of the pipeline's ``steps`` rounds at ``delta``.

        :func:`dprec.accounting.ddg_guarantee` / :func:`~dprec.accounting.skellam_guarantee` with
        this pipeline's sensitivity after rounding, noise, clients, padded dimension, granularity
        and sampling rate: one finite curve for every ``threat_model`` (default ``"server"``; see
        :meth:`epsilon`) under ``relation="zero"`` (the default; ``"add_remove"`` is ``inf`` with the
        reason). ``conversion``
        ``"rdp-mironov"`` (default: the conversion :meth:`epsilon` and the calibration use, so
        the two agree) or ``"rdp-balle"`` (tighter).
        """
        d = self._guarantee_delta(delta)
        fn = _acct.ddg_guarantee if self.mechanism == "ddg" else _acct.skellam_guarantee
        return fn(
            delta=d, steps=self._steps, threat_model=self._threat_model if threat_model is None else threat_model, relation=relation, conversion=conversion,
            l2_sensitivity=self.l2_sensitivity, noise_stddev=self._sigma, num_clients=self._n, dim=self.padded_dim,
            granularity=self._gamma, sampling_rate=self._sampling_rate,
        )

    def privacy_event(self) -> Any:
        """One round of this pipeline as an event of :class:`dprec.accounting.Accountant`.

        A :class:`~dprec.accounting.DDGEvent` or :class:`~dprec.accounting.SkellamEvent` with the
        pipeline's sensitivity after rounding, noise, clients, padded dimension, granularity and
        sampling rate; ``Accountant().compose(pipe.privacy_event(), count=rounds)`` composes it
        with anything else a training run spends.
        """
        from ..accounting import accountant  # noqa: PLC0415

        event = accountant.DDGEvent if self.mechanism == "ddg" else accountant.SkellamEvent
        return event(
            l2_sensitivity=self.l2_sensitivity,
            noise_stddev=self._sigma,
            num_clients=self._n,
            dim=self.padded_dim,
            granularity=self._gamma,
            sampling_rate=self._sampling_rate,
        )

    def concentrated_epsilon(self) -> float:
        """Theorem E.1's epsilon of one round without sampling (the ``eps`` of ``(1/2) eps^2``-zCDP)."""
        return _acct.ddg_concentrated_epsilon(self.l2_sensitivity, self._sigma, self._n, self.padded_dim, self._gamma)

    def noise_mse(self, num_clients: Optional[int] = None) -> float:
        """Expected squared error of the decoded mean due to the noise alone (closed form).

        The summed noise is isotropic in the rotated domain with variance ``n Var(share)``
        (integer units) per coordinate; the rotation is orthonormal, so each decoded coordinate
        of the unsketched mean has variance ``gamma^2 n Var / n^2``; a mean decode of a sketch
        adds ``rows`` independent cells per coordinate.
        """
        n = self._n if num_clients is None else num_clients
        rows = 1 if self._sketch is None else self._sketch.rows
        return self._gamma**2 * self._dim * rows * self._noise_variance() / n

    def rounding_mse(self, rounding_variance: float, num_clients: Optional[int] = None) -> float:
        """Expected squared error due to rounding, given the summed per-coordinate rounding variance
        ``sum_i sum_j f_ij (1 - f_ij)`` of the n clients' scaled, rotated vectors."""
        n = self._n if num_clients is None else num_clients
        rows = 1 if self._sketch is None else self._sketch.rows
        return self._gamma**2 * self._dim * rows / self.padded_dim * rounding_variance / (n * n)

    def noiseless_mean(self, updates: Any) -> np.ndarray:
        """What :meth:`decode` estimates for these clients' updates: the mean of :meth:`clip_and_sketch`, unsketched
        (float64, ``dim`` values); the decode of a sum without rounding, noise or wrap-around."""
        vectors = [self.clip_and_sketch(x) for x in updates]
        if not vectors:
            raise ValueError("updates must hold at least one client's update")
        mean = np.mean(vectors, axis=0)
        if self._sketch is not None:
            mean = np.asarray(self._sketch.decode(mean.reshape(self._sketch.shape)), dtype=np.float64)
        return mean

    def expected_mse(self, updates: Any) -> float:
        """Closed form of ``E ||decode(sum of encode(x_i)) - noiseless_mean(x)||^2`` for these clients' updates
        (all adding a noise share, no wrap-around): :meth:`noise_mse` plus :meth:`rounding_mse` of their scaled,
        rotated vectors' rounding variance ``sum f (1 - f)`` (``f`` the fractional parts)."""
        prepared = [self.prepare(x) for x in updates]
        if not prepared:
            raise ValueError("updates must hold at least one client's update")
        frac = np.concatenate(prepared) - np.floor(np.concatenate(prepared))
        n = len(prepared)
        return self.noise_mse(n) + self.rounding_mse(float(np.sum(frac * (1.0 - frac))), n)

    @property
    def seed(self) -> int:
        """The round's shared seed (rotation signs, sketch hashes)."""
        return self._rotation.seed

    def with_seed(self, seed: int) -> "DistributedPipeline":
        """The same pipeline for another round: a new shared ``seed``, every other parameter kept.

        Calibration (``target_epsilon=``) solves for the noise and the scale once; a training
        run then makes each round's pipeline with this, which costs microseconds. The
        accounting of the rounds is the caller's (``steps`` / :meth:`privacy_event`).
        """
        check_seed(seed)
        twin = copy.copy(self)
        group = self._rotation.group
        if self._sketch is not None:
            twin._sketch = CountSketch(self._dim, self._sketch.rows, self._sketch.cols, seed, group)
        twin._rotation = RandomizedHadamard(self._rotation.dim, seed, group=group)
        return twin

    def __repr__(self) -> str:
        sk = "" if self._sketch is None else f", sketch={self._sketch.shape}"
        return (
            f"{type(self).__name__}(dim={self._dim}, clip={self._clip}, bits={self._bits}, num_clients={self._n}"
            f"{sk}, noise_stddev={self._sigma:.6g}, granularity={self._gamma:.6g})"
        )

    # ---- client ------------------------------------------------------------------------

    def clip_and_sketch(self, x: Any) -> np.ndarray:
        """The vector whose L2 norm the mechanism bounds (float64, ``rows * cols`` or ``dim`` values):
        ``x`` clipped to ``clip``, then, with a sketch, its count-sketch re-clipped to
        :attr:`sensitivity_clip`. Linear in ``x`` until a clip binds, so the sum over clients of
        this vector is what the server's decode estimates."""
        v = _to_host_float64(x, "x")
        if v.size != self._dim:
            raise ValueError(f"x must have {self._dim} elements, got {v.size}")
        norm = float(np.linalg.norm(v))
        if norm > self._clip:
            v *= self._clip / norm
        if self._sketch is not None:
            v = np.asarray(self._sketch.encode(v)).reshape(-1)
            norm = float(np.linalg.norm(v))
            if norm > self._sensitive_clip:
                v *= self._sensitive_clip / norm
        return v

    def prepare(self, x: Any) -> np.ndarray:
        """:meth:`clip_and_sketch`, rotated and scaled: the real vector the client rounds (float64)."""
        y = np.asarray(self._rotation.forward(self.clip_and_sketch(x)), dtype=np.float64)
        y *= self.scale
        return y

    def encode(self, x: Any, *, rng: Optional[np.random.Generator] = None, add_noise: bool = True) -> np.ndarray:
        """One client's SecAgg input: ``(round(s R clip(x)) + noise) mod M`` (``padded_dim`` words).

        Parameters
        ----------
        x : array_like
            The update, ``dim`` elements of a floating-point array (NumPy, PyTorch CPU or CUDA,
            CuPy; GPU arrays are copied to the host, where the client steps run).
        rng : numpy.random.Generator, optional
            Where the client-private seeds of the rounding and the noise come from; by default
            the OS entropy source. Never pass a generator the server can reproduce.
        add_noise : bool
            Add this client's noise share (default). False only for a drawn client beyond the
            round's ``num_clients`` share holders (see the class's ``num_clients``).

        Returns
        -------
        numpy.ndarray
            ``padded_dim`` values of :attr:`message_dtype`, each in ``[0, M)``.
        """
        y = self.prepare(x)
        ints, _ = rounding.conditional_round(y, self.rounding_norm_bound if self._beta > 0 else None, rng=rng)
        if not isinstance(add_noise, (bool, np.bool_)):
            raise TypeError(f"add_noise must be a bool, got {type(add_noise).__name__}")
        if add_noise:  # False: a drawn client beyond the n share holders (see num_clients)
            ints += self._sample_noise(ints.size, rng)
        return modular.modular_reduce(ints, self._bits)

    # ---- SecAgg and server ------------------------------------------------------------------

    def aggregate(self, messages: Any, *, out: Any = None) -> Any:
        """The SecAgg simulator: the modular sum of the clients' messages (a (n, padded_dim) array or a
        sequence of messages), on their device. Only this sum reaches the server.

        Every message's shape is checked against ``padded_dim`` before anything is read or summed (a
        ValueError naming it): a payload of another size costs nothing but its shape."""
        m = self.padded_dim
        if isinstance(messages, (list, tuple)):
            for i, x in enumerate(messages):
                shape = _arrays.read(x, f"messages[{i}]").shape
                if shape != (m,):
                    raise ValueError(f"messages[{i}] has shape {shape}, but this pipeline's messages have shape ({m},)")
        else:
            shape = _arrays.read(messages, "messages").shape
            if len(shape) != 2 or shape[1] != m:
                raise ValueError(f"messages has shape {shape}, but this pipeline takes shape (n, {m})")
        return modular.modular_sum(messages, self._bits, out=out)

    def decode(self, total: Any, *, num_clients: Optional[int] = None) -> Any:
        """The mean estimate from the modular sum: lift, rescale, inverse rotation, unsketch, / n.

        Runs on the device of ``total`` (NumPy on the CPU; PyTorch CUDA or CuPy on the GPU) and
        returns a float64 array of ``dim`` elements in the same framework.

        Raises
        ------
        ValueError
            ``num_clients`` other than the pipeline's when ``sampling_rate < 1`` (the accounting
            needs the sum decoded by the fixed share count, see the class's ``num_clients``).
        """
        n = self._n if num_clients is None else check_int(num_clients, "num_clients", 1, 1 << 40)
        shape = _arrays.read(total, "total").shape
        if shape != (self.padded_dim,):  # before the lift allocates anything of the total's size
            raise ValueError(f"total has shape {shape}, but this pipeline's sums have shape ({self.padded_dim},)")
        if self._sampling_rate < 1.0 and n != self._n:
            raise ValueError(
                f"num_clients={n}: with sampling_rate={self._sampling_rate} the sum is decoded by the pipeline's "
                f"num_clients={self._n} (a count that depends on who was drawn would reveal it to the observer "
                "the amplified accounting hides it from)"
            )
        lifted = modular.centered_lift(total, self._bits, scale=self._gamma / n, dtype=np.float64)
        v = self._rotation.inverse(lifted)
        if self._sketch is not None:
            v = self._sketch.decode(v.reshape(self._sketch.shape))
        return v


class DDGPipeline(DistributedPipeline):
    """The distributed discrete Gaussian mechanism (Kairouz et al. 2021; Chen et al., Algorithms 1, 2, 6).

    Each client adds ``N_Z(0, (sigma/gamma)^2)`` noise (exact sampler,
    :func:`dprec.secagg.sample_discrete_gaussian`); the accounting is
    :func:`dprec.accounting.discrete.ddg_epsilon` (Theorem E.1 with its errata, see *Privacy accounting* in the docs, and
    Kairouz et al.'s per-order bounds). See :class:`DistributedPipeline` for the parameters.
    """

    mechanism = "ddg"

    def _epsilon_function(self) -> Any:
        return _acct.ddg_epsilon

    def _calibration_function(self) -> Any:
        return _acct.ddg_noise_for_epsilon

    def _sample_noise(self, n: int, rng: Optional[np.random.Generator]) -> np.ndarray:
        return noise.sample_discrete_gaussian(n, self.integer_noise_stddev, rng=rng)

    def _noise_variance(self) -> float:
        return _discrete_gaussian_variance(self.integer_noise_stddev)


class SkellamPipeline(DistributedPipeline):
    """The distributed Skellam mechanism (Agarwal, Kairouz and Liu 2021), the alternative to the DDG.

    Each client adds symmetric Skellam noise of variance ``(sigma/gamma)^2``
    (:func:`dprec.secagg.sample_skellam`); the sum of the shares is Skellam with the summed
    variance. Accounting: :func:`dprec.accounting.discrete.skellam_epsilon`. See
    :class:`DistributedPipeline` for the parameters.
    """

    mechanism = "skellam"

    def _epsilon_function(self) -> Any:
        return _acct.skellam_epsilon

    def _calibration_function(self) -> Any:
        return _acct.skellam_noise_for_epsilon

    def _sample_noise(self, n: int, rng: Optional[np.random.Generator]) -> np.ndarray:
        return noise.sample_skellam(n, self.integer_noise_stddev**2, rng=rng)

    def _noise_variance(self) -> float:
        return self.integer_noise_stddev**2

