"""ClientApp: a NumPyClient trains on this node's partition; distributed_dp_mod turns its update into noisy
integer words mod 2**bits, which Flower's secaggplus_mod masks."""

from __future__ import annotations

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common import Context

from dprec.flower import distributed_dp_mod
from dprec_secagg_app import task

NAMES = ("weight", "bias")  # the order of the model's arrays in the legacy list of ndarrays


class LinearClient(NumPyClient):
    def __init__(self, x: np.ndarray, y: np.ndarray, local_steps: int, lr: float) -> None:
        self.x, self.y, self.local_steps, self.lr = x, y, local_steps, lr

    def get_parameters(self, config):
        return [task.initial_arrays()[k] for k in NAMES]

    def fit(self, parameters, config):
        new = task.train(dict(zip(NAMES, parameters)), self.x, self.y, self.local_steps, self.lr)
        # The trained arrays, as without DP: the mods clip, rotate, round, add noise and mask on this node.
        return [new[k] for k in NAMES], len(self.x), {"train-loss": task.loss(new, self.x, self.y)}

    def evaluate(self, parameters, config):
        loss = task.loss(dict(zip(NAMES, parameters)), self.x, self.y)
        return loss, len(self.x), {"eval-loss": loss}


def client_fn(context: Context):
    # Set on each SuperNode: flower-supernode --node-config "partition-id=0 num-partitions=3"
    partition = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    x, y = task.load_data(*partition)
    cfg = context.run_config
    return LinearClient(x, y, int(cfg["local-steps"]), float(cfg["lr"])).to_client()


# distributed_dp_mod goes right after secaggplus_mod: SecAgg+ masks the noisy words it returns. The fit
# metrics (train-loss) stay on the node: make_distributed_dp_mod(keep_metrics=True) would send them.
app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod, distributed_dp_mod])
