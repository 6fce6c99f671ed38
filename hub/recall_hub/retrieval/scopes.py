"""The visibility scopes a search of one caller reads: its own private scope, its groups', global."""

from __future__ import annotations

from recall_schemas import BeadFilters

from recall_hub.context import HubContext
from recall_hub.store.vectors import caller_scopes, scope_name


async def searchable_scopes(ctx: HubContext, caller: str, filters: BeadFilters) -> list[str]:
    """The caller's scopes (its groups as of the latest membership change), narrowed by the filters."""
    return _narrowed(caller, await ctx.memberships.groups_of(caller), filters)


def last_read_scopes(ctx: HubContext, caller: str, filters: BeadFilters) -> list[str] | None:
    """:func:`searchable_scopes` as of the caller's groups this hub last read, unchecked (None: never read)."""
    groups = ctx.memberships.last_read(caller)
    return None if groups is None else _narrowed(caller, groups, filters)


def _narrowed(caller: str, groups: list[str], filters: BeadFilters) -> list[str]:
    if filters.group_id is not None:
        groups = [g for g in groups if g == filters.group_id]
    scopes = caller_scopes(caller, groups)
    if filters.visibility is not None:
        scopes = [s for s in scopes if s.startswith(scope_name(filters.visibility, "", ""))]
    return scopes
