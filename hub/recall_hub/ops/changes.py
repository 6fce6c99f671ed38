"""changes_since: replay a scope's change log from a cursor, as the caller may see it now."""

from __future__ import annotations

from recall_schemas import NotFound
from recall_schemas.coordination import ChangeBatch, ChangesSince

from recall_hub.context import HubContext
from recall_hub.ops.groups import role_in


async def changes_since(ctx: HubContext, caller: str, req: ChangesSince) -> ChangeBatch:
    if req.scope != "global" and await role_in(ctx, caller, req.scope) is None:
        raise NotFound(f"group {req.scope} not found")
    changes = await ctx.feed.read(req.scope, req.cursor, req.limit)
    ids = list({c.bead_id for c in changes if c.bead is not None})
    still_visible = await ctx.beads.visible_ids(caller, ids)
    # A snapshot of a bead the caller may no longer see is withheld: the change itself stays.
    redacted = [c if c.bead is None or c.bead_id in still_visible else c.model_copy(update={"bead": None})
                for c in changes]
    cursor = changes[-1].cursor if changes else req.cursor
    return ChangeBatch(changes=redacted, cursor=cursor)
