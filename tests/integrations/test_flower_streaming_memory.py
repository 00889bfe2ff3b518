"""The memory claim of DPRECStrategy's streaming rounds, without timing: one round through ``start`` on a grid
whose replies are made when pulled holds the float64 sums and the replies' small objects, never one decoded
update per client.

Python's allocations and NumPy's (NumPy reports its buffers to tracemalloc) are traced; the native kernels'
scratch is not. For scale: a float32 update of the model below is 400 kB, a float64 one 800 kB, so holding one
per client would cost 80 MB at 200 clients.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
import uuid

import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("dprec.flower is tested with flwr's Message API on Python >= 3.11", allow_module_level=True)
pytest.importorskip("flwr")
pytest.importorskip("scipy")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.supercore.run import Run  # noqa: E402

from dprec import DPRECCodec  # noqa: E402
from dprec.flower import (  # noqa: E402
    CONFIG_QUANTILE_NOISE,
    MESSAGE_KEY,
    QUANTILE_BIT_KEY,
    RECORD_KEY,
    DPRECStrategy,
    codec_from_config,
)
from dprec.flower._adaptive import noisy_bit  # noqa: E402
from dprec.rec.codec import DPRECMessage  # noqa: E402
from tests.integrations.test_flower import task_identity  # noqa: E402, F401 - the autouse fixture

PARAMS = (100, 1000)  # 10^5 parameters, one float32 tensor
SUMS = 8 * 100 * 1000  # bytes of the round's float64 sums
PER_REPLY = 16 * 1024  # what a reply may hold while the round lasts (measured: about 3.5 kB)
FIXED = 8 * 2**20  # aggregate_train's model-sized temporaries and the accountant's step (about 5 MB)


class LazyGrid(Grid):
    """A grid whose nodes answer as dprec_mod would (a well-formed message of the round's layout, a fresh seed,
    random indices, the noisy quantile bit), each reply made when pulled, at most ``batch`` per pull."""

    def __init__(self, n: int, batch: int = 50, seed: int = 0) -> None:
        self.nodes = list(range(101, 101 + n))
        self.batch, self.rng = batch, np.random.default_rng(seed)
        self.pending: dict[str, Message] = {}
        self.pull_interval = 0.0
        self._layout = None

    def set_run(self, run):
        pass

    @property
    def run(self):
        return Run.create_empty(1)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = uuid.uuid4().hex  # as InMemoryGrid does
            self.pending[m.metadata.message_id] = m
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        ready = [mid for mid in message_ids if mid in self.pending][: self.batch]
        return [self.answer(self.pending.pop(mid)) for mid in ready]

    def send_and_receive(self, messages, *, timeout=None):
        waiting, replies = set(self.push_messages(messages)), []
        while waiting:
            batch = list(self.pull_messages(waiting))
            assert batch
            replies.extend(batch)
            waiting.difference_update(m.metadata.reply_to_message_id for m in batch)
        return replies

    def answer(self, train: Message) -> Message:
        config = train.content.config_records["config"]
        if self._layout is None:
            shapes = {k: tuple(a.shape) for k, a in train.content.array_records["arrays"].items()}
            self._layout = codec_from_config(config).layout(
                {k: np.broadcast_to(np.float32(0), s) for k, s in shapes.items()}
            )
        layout, rng = self._layout, self.rng
        message = DPRECMessage(
            seed=int(rng.integers(0, 2**64, dtype=np.uint64)),
            bits=layout.bits,
            indices=rng.integers(0, 1 << np.array(layout.bits)).tolist(),
            layout_digest=layout.digest,
        )
        record = ConfigRecord({MESSAGE_KEY: message.to_bytes()})
        record[QUANTILE_BIT_KEY] = float(noisy_bit(bool(rng.random() < 0.5), config[CONFIG_QUANTILE_NOISE]))
        metrics = MetricRecord({"num-examples": int(rng.integers(50, 150)), "train-loss": float(rng.random())})
        return Message(RecordDict({RECORD_KEY: record, "metrics": metrics}), reply_to=train)


def traced_round(clients: int, shape: tuple[int, ...] = PARAMS) -> tuple[int, int, DPRECStrategy]:
    """One streamed round through ``start``: (peak traced bytes while the replies were pulled and decoded,
    peak traced bytes of the whole round, the strategy)."""
    weights = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    initial = ArrayRecord({"w": Array(weights)})
    del weights
    codec = DPRECCodec(sigma=0.01, clip_multiplier=0.5, bits=7, max_group_size=4096)
    strategy = DPRECStrategy(
        FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=clients, min_train_nodes=clients),
        codec,
        delta=1e-5,
    )
    grid = LazyGrid(clients)
    streamed = []
    aggregate = strategy.aggregate_train

    def aggregate_train(server_round, replies):
        streamed.append(tracemalloc.get_traced_memory()[1])  # the peak until the last reply was decoded
        return aggregate(server_round, replies)

    strategy.aggregate_train = aggregate_train
    gc.collect()
    tracemalloc.start()
    try:
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    stats = strategy.history[-1]
    assert stats.streamed and stats.num_aggregated == clients and stats.num_rejected == 0
    return streamed[0], peak, strategy


def test_a_streamed_round_holds_the_sums_not_an_update_per_client():
    traced_round(2, (8,))  # warm-up: first-call imports (the accountant's SciPy) are not the round's memory
    streamed_200, peak_200, _ = traced_round(200)
    streamed_400, peak_400, _ = traced_round(400)
    detail = f"streamed {streamed_200:,} / {streamed_400:,} B, round {peak_200:,} / {peak_400:,} B"
    # While the replies arrive: the float64 sums, the global arrays' copy and the replies' small objects.
    assert streamed_200 < 2 * SUMS + 200 * PER_REPLY, detail
    assert streamed_400 < 2 * SUMS + 400 * PER_REPLY, detail
    # The whole round: add aggregate_train's model-sized temporaries and the accountant's step.
    assert peak_200 < 3 * SUMS + 200 * PER_REPLY + FIXED, detail
    # Twice the clients: about the same peak, grown by the replies' objects only (a float32 update would be
    # 400 kB a client, 80 MB for the 200 more).
    assert peak_400 <= 1.2 * peak_200, detail
    assert peak_400 - peak_200 < 200 * PER_REPLY, detail
    assert streamed_400 - streamed_200 < 200 * PER_REPLY, detail
