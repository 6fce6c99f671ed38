"""What of a bead is embedded, and embedding texts (an embedder that fails is ``unavailable``).

Shared by the writes that keep the vector sets (:mod:`recall_hub.ops.indexing`) and the reads that
embed a stored bead again (``find_similar``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from recall_schemas import Unavailable

from recall_hub.context import HubContext
from recall_hub.embedders import EmbedderError


def bead_text(props: Mapping[str, Any]) -> str:
    title = props.get("title") or ""
    content = props.get("content") or ""
    return f"{title}\n{content}" if content and content != title else title


async def embed_texts(ctx: HubContext, texts: Sequence[str]) -> np.ndarray:
    try:
        return await ctx.embedder.embed(list(texts))
    except EmbedderError as exc:
        raise Unavailable(f"embedder failed: {exc}") from exc
