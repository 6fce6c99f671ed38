"""Retrieval-quality evaluations that run through the bus against a real hub (``recall eval ...``)."""

from __future__ import annotations

from .locomo import LocomoReport, markdown, render, run_locomo

__all__ = ["LocomoReport", "markdown", "render", "run_locomo"]
