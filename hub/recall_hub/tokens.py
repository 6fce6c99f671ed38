"""Token estimates for budgets.

An estimate, not a tokenizer: about one token per 4 characters of English (the usual rule for
BPE tokenizers such as cl100k), never less than one per word. Budgets are met by this estimate.
"""

from __future__ import annotations

import math


def count_tokens(text: str) -> int:
    return max(math.ceil(len(text) / 4), len(text.split()))
