"""dprec: private, communication-efficient federated learning."""
