"""Groups and membership. Only a group's ops changes membership; a member may leave on its own; a
group always keeps at least one ops (checked inside the query that would change it, see
:class:`recall_hub.store.groups.GroupStore`).

Group ids: a non-member learns nothing about a group from any reply — neither its content nor, for
an id the hub issued, whether it exists (see docs/security.md, *Group ids*).
"""

from __future__ import annotations

import re
import secrets

from recall_schemas import (
    AddMember,
    Conflict,
    CreateGroup,
    Forbidden,
    Group,
    GroupList,
    ListGroups,
    ListMembers,
    NotFound,
    RemoveMember,
)

from recall_hub.context import HubContext
from recall_hub.store.groups import Refusal
from recall_hub.timeutil import now_ms

ISSUED_ID = re.compile(r"^g_[0-9a-f]{32}$")
"""The form of the group ids the hub issues. A caller may not choose an id of this form, so whether
such an id exists cannot be probed by trying to create it."""


def issue_group_id() -> str:
    return f"g_{secrets.token_hex(16)}"


def _unavailable(group_id: str) -> Conflict:
    # One reply for every refused id, whoever asks: it says nothing about a group that may hold it.
    return Conflict(f"group_id {group_id} is not available; leave group_id out to get a fresh one")


async def role_in(ctx: HubContext, caller: str, group_id: str) -> str | None:
    """The caller's role in the group, None for a non-member (kept for the modules that import it)."""
    return await ctx.groups.role_in(caller, group_id)


def _checked(outcome: Group | Refusal, group_id: str, ai_id: str) -> Group:
    if isinstance(outcome, Group):
        return outcome
    if outcome is Refusal.FORBIDDEN:
        raise Forbidden(f"only the ops of {group_id} may change its membership")
    if outcome is Refusal.LAST_OPS:
        raise Conflict(f"{ai_id} is the last ops of {group_id}; hand the role over first")
    raise NotFound(f"group {group_id} not found")


async def create_group(ctx: HubContext, caller: str, req: CreateGroup) -> Group:
    if req.group_id is not None and ISSUED_ID.match(req.group_id):
        raise _unavailable(req.group_id)
    group_id = req.group_id or issue_group_id()
    group = await ctx.groups.create(caller, group_id, req.name, now_ms())
    if group is None:
        raise _unavailable(group_id)
    await ctx.memberships.changed()
    return group


async def add_member(ctx: HubContext, caller: str, req: AddMember) -> Group:
    outcome = await ctx.groups.set_member(caller, req.group_id, req.ai_id, req.role.value, now_ms())
    group = _checked(outcome, req.group_id, req.ai_id)
    await ctx.memberships.changed()
    return group


async def remove_member(ctx: HubContext, caller: str, req: RemoveMember) -> Group:
    outcome = await ctx.groups.remove_member(caller, req.group_id, req.ai_id)
    group = _checked(outcome, req.group_id, req.ai_id)
    await ctx.memberships.changed()
    return group


async def list_members(ctx: HubContext, caller: str, req: ListMembers) -> Group:
    group = await ctx.groups.get(caller, req.group_id)
    if group is None:
        raise NotFound(f"group {req.group_id} not found")
    return group


async def list_groups(ctx: HubContext, caller: str, req: ListGroups) -> GroupList:
    return GroupList(groups=await ctx.groups.mine(caller))
