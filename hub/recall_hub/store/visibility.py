"""Visibility, enforced inside every query.

private = the creator only; group = current members of the bead's group; global = everyone.
Each read query starts with :data:`MY_GROUPS`, which binds ``my_groups`` (and ``my_ops_groups``)
from the membership graph at query time, so leaving a group removes access on the very next request. A bead that fails
:func:`visible` is treated exactly like a missing one.
"""

from __future__ import annotations

MY_GROUPS = (
    "OPTIONAL MATCH (:AI {ai_id: $caller})-[my_role:MEMBER_OF]->(my_group:Group) "
    "WITH collect(my_group.group_id) AS my_groups, "
    "collect(CASE WHEN my_role.role = 'ops' THEN my_group.group_id END) AS my_ops_groups "
)


def visible(var: str) -> str:
    """Cypher predicate: the bead bound to ``var`` may be seen by ``$caller``."""
    return (
        f"({var}.visibility = 'global'"
        f" OR ({var}.visibility = 'private' AND {var}.created_by = $caller)"
        f" OR ({var}.visibility = 'group' AND {var}.group_id IN my_groups))"
    )


def may_modify(var: str) -> str:
    """Cypher predicate: ``$caller`` may change or delete the (visible) bead bound to ``var``.

    The creator may; for a group bead, so may the group's ops.
    """
    return f"({var}.created_by = $caller OR ({var}.visibility = 'group' AND {var}.group_id IN my_ops_groups))"
