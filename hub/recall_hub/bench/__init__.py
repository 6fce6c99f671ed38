"""Benchmarks and evaluations: latency through the bus, vector-set studies, LoCoMo retrieval quality."""

from recall_hub.bench.locomo import LocomoReport, markdown, render, run_locomo

__all__ = ["LocomoReport", "markdown", "render", "run_locomo"]
