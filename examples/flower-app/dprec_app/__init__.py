"""A Flower app with DP-REC: a linear model on synthetic data, one partition per SuperNode."""
