"""changes_since: replay a scope's change log from a cursor, as the caller may see it now."""

from __future__ import annotations

from recall_schemas import NotFound
from recall_schemas.coordination import ChangeBatch, ChangesSince

from recall_hub.context import HubContext
from recall_hub.ops.groups import role_in
from recall_hub.store.visibility import MY_GROUPS, visible


async def changes_since(ctx: HubContext, caller: str, req: ChangesSince) -> ChangeBatch:
    if req.scope != "global" and await role_in(ctx, caller, req.scope) is None:
        raise NotFound(f"group {req.scope} not found")
    changes = await ctx.feed.read(req.scope, req.cursor, req.limit)
    ids = list({c.bead_id for c in changes if c.bead is not None})
    rows = await ctx.graph.ro_query(
        MY_GROUPS + f"MATCH (b:Bead) WHERE b.bead_id IN $ids AND {visible('b')} RETURN b.bead_id",
        {"caller": caller, "ids": ids},
    )
    still_visible = {row[0] for row in rows}
    # A snapshot of a bead the caller may no longer see is withheld: the change itself stays.
    redacted = [c if c.bead is None or c.bead_id in still_visible else c.model_copy(update={"bead": None})
                for c in changes]
    cursor = changes[-1].cursor if changes else req.cursor
    return ChangeBatch(changes=redacted, cursor=cursor)
