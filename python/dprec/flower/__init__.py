"""DP-REC for Flower (``flwr``): a client mod and a server strategy wrapper.

Adding DP-REC to an existing Flower app (Message API: ``ClientApp``, ``ServerApp``,
``flwr.serverapp.strategy``) takes two changes::

    from dprec import DPRECCodec
    from dprec.flower import DPRECStrategy, dprec_mod

    client_app = ClientApp(mods=[dprec_mod])                  # client: compress the update
    codec = DPRECCodec(sigma=0.1, clip_multiplier=1.0, max_group_size=4096)
    strategy = DPRECStrategy(FedAvg(fraction_train=0.1), codec, delta=1e-5)  # server: decode, aggregate, account
    # or the wrapper samples each node with probability 0.1 (Poisson sampling)
    strategy = DPRECStrategy(FedAvg(), codec, delta=1e-5, sampling="poisson", sampling_rate=0.1)
    # or the paper's sampling: 10 slots per round, each a node drawn with replacement
    strategy = DPRECStrategy(FedAvg(), codec, delta=1e-5, sampling="with_replacement", clients_per_round=10)

Nothing else changes: the ``@app.train()`` function still returns its trained arrays in an
``ArrayRecord`` and its metrics (with ``"num-examples"``) in a ``MetricRecord``, and
``strategy.start(grid=grid, initial_arrays=..., num_rounds=...)`` still returns Flower's
``Result``. Requires ``flwr >= 1.22`` (``pip install "dprec[flower]"``).

* The server's train config carries the codec's parameters (:func:`codec_config`, keys
  :data:`CONFIG_SIGMA`, :data:`CONFIG_CLIP_MULTIPLIER`, :data:`CONFIG_BITS`,
  :data:`CONFIG_MAX_GROUP_SIZE`). The mod checks all of them, and the cost of the encode they
  ask for, before the client trains; :func:`make_dprec_mod` makes a mod that also refuses a
  larger ``clip_multiplier`` or fewer bits per group than the client accepts. The mod never
  raises: every failure is an error reply, and one after training says only that the client
  could not encode its update.
* :func:`dprec_mod` replaces the reply's ``ArrayRecord`` by a ``ConfigRecord`` named
  :data:`RECORD_KEY` holding the :meth:`DPRECMessage.to_bytes` blob under :data:`MESSAGE_KEY`;
  the update is ``reply - global`` of the floating-point arrays. The client's diagnostics stay in
  ``context.state`` under :data:`STATE_KEY`.
* :class:`DPRECStrategy` takes at most one reply per train message of the round (one per
  sampled node, except with replacement: one per slot), drops any reply that fails (logged,
  counted in ``"dprec-dropped"``), decodes the replies as they arrive into float64 sums (memory
  O(model), whatever the number of clients) and averages the kept ones (uniform weights unless
  ``weighted_by_key``), applies the mean, adapts the clip norm (:class:`AdaptiveClipping`, on by
  default: each message carries a noisy bit, :data:`QUANTILE_BIT_KEY`), and accounts each round with ``sampling=``
  (:data:`STRATEGY_SAMPLING`), ``threat_model`` (default ``"server"``), ``relation`` (default
  ``"zero"``) and ``method="sound"``; the per-round metrics carry ``"dprec-epsilon"`` and
  ``"dprec-epsilon.<threat model>.<relation>"``, and :attr:`DPRECStrategy.history` the rounds
  (:class:`DPRECRound`).

Legacy apps (``NumPyClient``, ``ClientApp(client_fn=...)``, ``ServerApp(server_fn=...)`` with a
``flwr.server.strategy`` strategy) use the same mod and :class:`DPRECLegacyStrategy`::

    client_app = ClientApp(client_fn=client_fn, mods=[dprec_mod])  # was ClientApp(client_fn=client_fn)
    strategy = DPRECLegacyStrategy(FedAvg(...), codec, delta=1e-5)  # FedAvg, FedProx, FedAdam, ... of flwr.server.strategy

The train messages are then ``FitIns`` (the codec's parameters in their config), the replies ``FitRes``
whose parameters hold no tensors and whose metrics carry the DP-REC message; the wrapper runs a
:class:`DPRECStrategy` inside and hands the wrapped strategy the DP mean, so FedAdam's or FedAvgM's
server step applies to it.

Distributed DP (DDG or Skellam noise, Chen et al.) under Flower's own secure aggregation, SecAgg+, for
legacy-API apps: the client adds :func:`distributed_dp_mod` right after Flower's ``secaggplus_mod``, the
server wraps its strategy in :class:`DistributedDPStrategy` and runs its :meth:`~DistributedDPStrategy.secagg_workflow`::

    client_app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod, distributed_dp_mod])
    strategy = DistributedDPStrategy(FedAvg(...), clip_norm=0.5, noise_multiplier=1.0, bits=20, delta=1e-5)
    DefaultWorkflow(fit_workflow=strategy.secagg_workflow(num_shares=5, reconstruction_threshold=3))(grid, legacy)

SecAgg+ carries the clients' integer words mod ``2**bits`` exactly (:func:`secagg_ranges`); the server sees and
decodes only their sum and accounts each round against itself (the *Distributed DP in Flower* page);
:func:`secagg_plus_sum` runs SecAgg+ in one process over given words (``dprec compare``'s Flower rows).

Bad configurations fail at construction with the class, its API and the fix named: a strategy of the
other API, a Poisson rate outside (0, 1], a wrapped strategy whose fraction is outside (0, 1] or whose
minimum sample exceeds ``num_clients`` (sampling without replacement); ``make_dprec_mod`` given as a mod
is a TypeError naming the fix at its first call.

See the *Flower* page of the documentation for what travels, what the server keeps, and how each
sampling mode is accounted.
"""

from __future__ import annotations

from ._adaptive import AdaptiveClipping
from ._common import (
    CONFIG_BITS,
    CONFIG_CLIP_MULTIPLIER,
    CONFIG_MAX_GROUP_SIZE,
    CONFIG_QUANTILE_NOISE,
    CONFIG_SIGMA,
    CONFIG_SLOT,
    DEFAULT_CANDIDATE_ELEMENTS_PER_PARAMETER,
    DEFAULT_CANDIDATES_PER_PARAMETER,
    DEFAULT_MAX_CANDIDATE_ELEMENTS,
    DEFAULT_MAX_CANDIDATES,
    DEFAULT_MIN_BITS,
    DROP_REASONS,
    MESSAGE_KEY,
    QUANTILE_BIT_KEY,
    RECORD_KEY,
    STATE_KEY,
    STRATEGY_SAMPLING,
    codec_config,
    codec_from_config,
    wire_nbytes,
)
from ._inprocess import secagg_plus_sum
from ._legacy import DPRECLegacyStrategy
from ._mod import dprec_mod, make_dprec_mod
from ._secagg import MAX_SECAGG_BITS, secagg_ranges
from ._secagg_mod import DDP_STATE_KEY, distributed_dp_mod, make_distributed_dp_mod
from ._secagg_strategy import DistributedDPRound, DistributedDPStrategy, DistributedDPWorkflow
from ._strategy import DPRECRound, DPRECStrategy

__all__ = [
    "AdaptiveClipping",
    "CONFIG_QUANTILE_NOISE",
    "QUANTILE_BIT_KEY",
    "CONFIG_BITS",
    "CONFIG_CLIP_MULTIPLIER",
    "CONFIG_MAX_GROUP_SIZE",
    "CONFIG_SIGMA",
    "CONFIG_SLOT",
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_CANDIDATES_PER_PARAMETER",
    "DEFAULT_MAX_CANDIDATE_ELEMENTS",
    "DEFAULT_CANDIDATE_ELEMENTS_PER_PARAMETER",
    "DEFAULT_MIN_BITS",
    "DDP_STATE_KEY",
    "DistributedDPRound",
    "DistributedDPStrategy",
    "DistributedDPWorkflow",
    "MAX_SECAGG_BITS",
    "distributed_dp_mod",
    "make_distributed_dp_mod",
    "secagg_plus_sum",
    "secagg_ranges",
    "DPRECLegacyStrategy",
    "DPRECRound",
    "DPRECStrategy",
    "DROP_REASONS",
    "MESSAGE_KEY",
    "RECORD_KEY",
    "STATE_KEY",
    "STRATEGY_SAMPLING",
    "codec_config",
    "codec_from_config",
    "dprec_mod",
    "make_dprec_mod",
    "wire_nbytes",
]
