"""Retrieval: candidate lists, fusion, graph context, priors and token-budgeted packing."""
