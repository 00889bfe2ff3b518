"""ClientApp: trains on this node's partition; dprec_mod turns the update into a DP-REC message."""

from __future__ import annotations

from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from dprec.flower import dprec_mod
from dprec_app import task

# The mod encodes (clips, adds the DP-REC noise, compresses) the update on this node: only the
# message bytes leave it. make_dprec_mod(max_clip_multiplier=...) also caps what the server may ask.
app = ClientApp(mods=[dprec_mod])


def _partition(context: Context) -> tuple[int, int]:
    # Set on each SuperNode: flower-supernode --node-config "partition-id=0 num-partitions=3"
    return int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])


@app.train()
def train(msg: Message, context: Context) -> Message:
    x, y = task.load_data(*_partition(context))
    arrays = {k: a.numpy() for k, a in msg.content["arrays"].items()}
    new = task.train(arrays, x, y, int(context.run_config["local-steps"]), float(context.run_config["lr"]))
    content = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(v) for k, v in new.items()}),
            "metrics": MetricRecord({"num-examples": len(x), "train-loss": task.loss(new, x, y)}),
        }
    )
    return Message(content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    x, y = task.load_data(*_partition(context))
    arrays = {k: a.numpy() for k, a in msg.content["arrays"].items()}
    metrics = MetricRecord({"num-examples": len(x), "eval-loss": task.loss(arrays, x, y)})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
