"""The operation table: each request/reply operation, its request model and its reply model.

The hub registers one endpoint per entry, the client calls them by name, the JSON Schema and
AsyncAPI exports are generated from it. Adding an operation means adding one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from . import audit as a
from . import capture as cap
from . import coordination as c
from . import forget as f
from . import history as h
from . import requests as r
from . import trust as t
from .models import Group, MemoryBead, Relationship, Subgraph


@dataclass(frozen=True)
class Operation:
    name: str
    request: type[BaseModel]
    reply: type[BaseModel]
    summary: str


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("create_bead", r.CreateBead, MemoryBead, "Store a memory bead"),
        Operation(
            "create_beads", r.CreateBeads, r.CreatedBeads,
            "Store many beads in one request (each checked and idempotent on its own)",
        ),
        Operation("get_bead", r.GetBead, MemoryBead, "Read one bead (touches accessed_at)"),
        Operation("update_bead", r.UpdateBead, MemoryBead, "Change fields of a bead"),
        Operation(
            "edit_bead", r.EditBead, MemoryBead,
            "Add or remove tags and metadata keys, raise or lower importance; concurrent edits never lose each other",
        ),
        Operation("delete_bead", r.DeleteBead, r.Deleted, "Delete a bead and its relationships"),
        Operation("search_beads", r.SearchBeads, r.SearchResult, "Search visible beads"),
        Operation("find_similar", r.FindSimilar, r.SearchResult, "Beads whose meaning is close to a bead's"),
        Operation("why", r.Why, r.WhyResult, "Semantic seeds plus the typed graph around them"),
        Operation("context", r.GetContext, r.ContextBlock, "Best memory for a query within a token budget"),
        Operation(
            "get_by_session", r.GetBySession, r.BeadList,
            "Visible beads of a session (the caller's own of that id, else a groupmate's), oldest first",
        ),
        Operation("get_by_group", r.GetByGroup, r.BeadList, "Beads of a group, newest first"),
        Operation("get_by_tag", r.GetByTag, r.BeadList, "Visible beads with a tag, newest first"),
        Operation("get_recent", r.GetRecent, r.BeadList, "Most recent visible beads"),
        Operation("add_relationship", r.AddRelationship, Relationship, "Link two visible beads"),
        Operation("get_relationships", r.GetRelationships, r.RelationshipList, "Edges of a bead"),
        Operation(
            "get_edges", r.GetEdges, r.RelationshipList,
            "The outgoing edges of many beads at once, between beads the caller may see (a graph view)",
        ),
        Operation("traverse_graph", r.TraverseGraph, Subgraph, "Breadth-first walk over visible beads"),
        Operation("deduplicate_beads", r.DeduplicateBeads, r.DuplicateReport, "Clusters of equal content"),
        Operation("rank_by_importance", r.RankByImportance, r.BeadList, "Sort beads by importance"),
        Operation("decay_old_memories", r.DecayOldMemories, r.DecayReport, "Archive long-unused beads"),
        Operation("create_group", r.CreateGroup, Group, "Create a group; the caller becomes its ops"),
        Operation("add_member", r.AddMember, Group, "Add a member (ops only)"),
        Operation("remove_member", r.RemoveMember, Group, "Remove a member (ops only)"),
        Operation("list_members", r.ListMembers, Group, "A group and its members (members only)"),
        Operation("list_groups", r.ListGroups, r.GroupList, "The caller's groups"),
        Operation("get_session", c.GetSession, c.Session, "A session's owner, group and state"),
        Operation(
            "migrate_session_with_memories", c.MigrateSession, c.MigrationResult, "Move a session's beads, atomically"
        ),
        Operation("check_session", c.CheckSession, c.IntegrityReport, "Session integrity, memories included"),
        Operation("ai_state_save", c.SaveAIState, c.AIState, "Save the caller's todos, notes and summary"),
        Operation("ai_state_get", c.GetAIState, c.AIState, "The caller's saved state"),
        Operation("ai_state_transfer", c.TransferAIState, c.AIState, "Hand the caller's state to a group peer"),
        Operation("transfer_ops", c.TransferOps, c.Handoff, "Hand the ops role over, with context, atomically"),
        Operation("acknowledge_handoff", c.AcknowledgeHandoff, c.Handoff, "The new ops accepts a handoff"),
        Operation("list_handoffs", c.ListHandoffs, c.HandoffList, "A group's ops transfers, newest first (members)"),
        Operation("handoff_brief", c.GetHandoffBrief, c.HandoffBrief, "What a new ops needs to know"),
        Operation("learn", c.Learn, c.KVEntry, "Remember a value under a key (private key-value memory)"),
        Operation("recall", c.Recall, c.KVEntry, "The value learnt under a key"),
        Operation("unified_recall", c.UnifiedRecall, c.UnifiedRecallResult, "Key-value memory and beads at once"),
        Operation("promote_to_bead", c.PromoteToBead, MemoryBead, "Turn a key-value memory into a bead"),
        Operation("changes_since", c.ChangesSince, c.ChangeBatch, "Replay a group's bead changes from a cursor"),
        # --- lifecycle: trust, supersede, history ---
        Operation("verify_bead", t.VerifyBead, MemoryBead, "Vouch for a bead someone else wrote (ranks a bit higher)"),
        Operation("reject_bead", t.RejectBead, MemoryBead, "Mark a bead someone else wrote as wrong (demotes it)"),
        Operation(
            "list_stale", t.ListStale, t.StaleList,
            "Visible beads to re-check: old unverified weak provenance, or a source superseded or gone",
        ),
        Operation("supersede_bead", h.SupersedeBead, Relationship, "Replace a bead by a newer one (UPDATES)"),
        Operation("get_history", h.GetHistory, h.BeadHistory, "The visible older and newer versions of a bead"),
        # --- lifecycle: forget ---
        Operation("forget_bead", f.ForgetBead, f.Tombstone, "Forget a bead for good, leaving a tombstone"),
        Operation(
            "forget_by_author", f.ForgetByAuthor, f.ForgottenByAuthor,
            "Forget every bead an identity created where the caller may (its own, or its groups as ops)",
        ),
        Operation("list_forgotten", f.ListForgotten, f.TombstoneList, "Tombstones the caller forgot or is ops of"),
        Operation("allow_forgotten", f.AllowForgotten, f.Tombstone, "Let a forgotten bead's content be stored again"),
        # --- lifecycle: time ---
        # --- capture: extraction, collectors ---
        Operation(
            "remember_extracted", cap.RememberExtracted, cap.RememberedTopics,
            "Extract facts from a text (LLM, else outline) and store each PART_OF its topic hub, atomically",
        ),
        Operation(
            "remember_topics", cap.RememberTopics, cap.RememberedTopics,
            "Store facts already split by topic PART_OF their topic hubs, atomically (keyed facts update)",
        ),
        Operation(
            "recall_where", cap.RecallWhere, cap.WhereResult,
            "Where a subject was met: files, commits, sessions and commands of the matching visible beads",
        ),
        # --- audit ---
        Operation(
            "audit_log", a.GetAuditLog, a.AuditTrail,
            "Who read and wrote the group's beads, allowed or refused (the group's ops only)",
        ),
    )
}
