"""A Flower app of the legacy API with DP-REC: NumPyClient and a ServerApp(server_fn=...)."""
