"""A question in the first person is about its asker: the beads the asker wrote weigh more.

"What book am I reading now?", "where did I leave the deploy key?": the answer is what the asker said, and an
answer someone else gave back — an assistant's long reply about books in general — can share more of the
question's words. So when a query speaks of its asker (I, me, my, …), the candidates the caller wrote have their
relevance multiplied by :data:`OWN_BOOST`, and their explanation says so. A query in the third person ("what
did Caroline research?") or one that names no one is left alone, and so is a caller who wrote every
candidate (the boost then changes no order).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from recall_hub.context import HubContext
from recall_hub.retrieval.ranking import Fused, split_by_screening

OWN_BOOST = 2.0
"""Chosen by cross-validation on both dev sets (``scripts/tune_ranking.py``, variants ``own.*``; docs/retrieval.md):
LongMemEval's turn Recall@10 0.783 -> 0.875 on its 120 questions, LoCoMo (third-person questions) unchanged."""
FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "i'm", "i've", "i'd", "i'll"})
_WORD = re.compile(r"[\w']+")


def speaks_of_self(query: str) -> bool:
    return not FIRST_PERSON.isdisjoint(_WORD.findall(query.lower().replace("\u2019", "'")))


async def boost_own(
    ctx: HubContext, caller: str, query: str, fused: Mapping[str, Fused], screened: Mapping[str, Mapping[str, Any]]
) -> None:
    """Raise the candidates ``caller`` wrote when ``query`` is in the first person (in place). Their authors are
    what screening read (``screened``); the graph is asked only of candidates screened without one."""
    if not speaks_of_self(query):
        return
    known, unread = split_by_screening(fused, screened, "created_by")
    own = {bead_id for bead_id, props in known.items() if props["created_by"] == caller}
    if unread:
        own |= await ctx.beads.written_by(caller, unread)
    for bead_id in sorted(own):
        entry = fused[bead_id]
        entry.relevance *= OWN_BOOST
        entry.notes.append(f"asked in the first person, and the asker wrote it: x{OWN_BOOST}")
