"""A Flower app with distributed DP over Flower's SecAgg+: NumPyClient, secaggplus_mod and distributed_dp_mod."""
