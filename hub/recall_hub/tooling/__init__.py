"""Operator tooling: the recall CLI, the embedded stack, NATS auth, the demo and the scenario."""
