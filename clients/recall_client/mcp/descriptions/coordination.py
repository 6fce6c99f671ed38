"""Texts of the tools that coordinate a group: groups, sessions, agent state, ops handoff, key-value
memory, the change feed and the audit trail."""

from __future__ import annotations

from .shared import FILTERS, GROUP_ID, IF_VERSION, SESSION_ID, VISIBILITY, ToolText

COORDINATION_TEXTS: dict[str, ToolText] = {
    # --- groups --------------------------------------------------------------------------------------
    "list_groups": ToolText(
        "My groups",
        "Use to find the group_id to share memories with (visibility='group'): the groups you belong to, "
        "with their members and roles.",
    ),
    "list_members": ToolText(
        "Members of a group",
        "Use to see who is in one of your groups and their roles (ops or agent). Members only.",
        params={"group_id": GROUP_ID},
    ),
    "create_group": ToolText(
        "Create a group",
        "Use to start a team that shares memory: creates a group with you as its ops (coordinator); then "
        "add_member the agents.",
        params={
            "name": "Human-readable name, e.g. 'payments team'.",
            "group_id": "Optional id to give it, 'g_…'; default a fresh one.",
        },
    ),
    "add_member": ToolText(
        "Add a group member",
        "Use, as a group's ops, to give an AI access to the group's beads, or to change a member's role.",
        params={
            "group_id": GROUP_ID,
            "ai_id": "The AI id to add: 'a_…' for an agent, 'o_…' for an ops.",
            "role": "'agent' (default) or 'ops' (may manage membership).",
        },
    ),
    "remove_member": ToolText(
        "Remove a group member",
        "Use, as a group's ops, to take an AI out of the group; it loses access to the group's beads at once.",
        params={"group_id": GROUP_ID, "ai_id": "The AI id to remove."},
    ),
    # --- sessions ------------------------------------------------------------------------------------
    "get_session": ToolText(
        "Session info",
        "Use to learn a work session's owner, group and state (active, ended or migrated, with its "
        "successor). Visible to its owner and its group's members.",
        params={"session_id": SESSION_ID},
    ),
    "migrate_session_with_memories": ToolText(
        "Move a session's memories",
        "Use when you resume work under a new session id: moves every bead of one of your sessions to another"
        " of yours in one atomic step, keeping ids and links; the old session is marked migrated.",
        params={
            "old_session_id": "The session whose beads move. " + SESSION_ID,
            "new_session_id": "The session they move to; yours, or new (it becomes yours).",
        },
    ),
    "check_session": ToolText(
        "Check a session",
        "Use when a session's memory looks wrong: reports beads whose session, group or author is "
        "inconsistent, whose search vector is missing, or whose FOLLOWS_FROM chain is broken. No problems "
        "means healthy.",
        params={"session_id": SESSION_ID},
    ),
    # --- agent state ---------------------------------------------------------------------------------
    "ai_state_save": ToolText(
        "Save my working state",
        "Use to keep your working state across restarts and handovers: todos, working notes, a context "
        "summary, custom state. Only the fields you give are replaced; private until you hand it over.",
        params={
            "todos": "Your whole todo list, replacing the saved one: [{text, done, bead_id?}] (at most 500).",
            "working_notes": "Free-form scratch notes, replacing the saved ones (at most 64 KiB).",
            "context_summary": "Where you are in your work, for a successor or a later you (at most 64 KiB).",
            "custom_state": "Any JSON object, replacing the saved one.",
            "if_version": IF_VERSION + " The version is in ai_state_get's answer (0: never saved).",
        },
    ),
    "ai_state_get": ToolText(
        "My working state",
        "Use when you start or resume work: your saved todos, working notes, context summary, custom state, "
        "and whose state was merged into yours.",
    ),
    "ai_state_transfer": ToolText(
        "Hand my state to a peer",
        "Use when passing work to an AI who shares a group with you: your open todos, notes and summary are "
        "merged into theirs (nothing of theirs is lost).",
        params={"to_ai_id": "The AI id (a_… or o_…) that takes over your work."},
    ),
    # --- ops handoff ---------------------------------------------------------------------------------
    "transfer_ops": ToolText(
        "Hand over the ops role",
        "Use when you, the group's ops, hand your role to another member: in one atomic step the role "
        "moves, a handoff bead with your context summary is stored and linked, and your working state goes "
        "along. The new ops is notified and should call handoff_brief, then acknowledge_handoff.",
        params={
            "group_id": GROUP_ID,
            "to_agent": "The current member (AI id) who becomes the ops.",
            "context_summary": "What the new ops must know: state of the work, open decisions, risks, next "
            "steps (at most 64 KiB).",
            "bead_ids": "Beads the summary covers (at most 200); default the group's most important ones.",
        },
    ),
    "acknowledge_handoff": ToolText(
        "Accept an ops handoff",
        "Use, as the new ops of a group, to accept the handoff made to you (until then it reads as pending); "
        "the handoff_id is in handoff_brief's result.",
        params={"handoff_id": "Id of the handoff, 'h_…'."},
    ),
    "list_handoffs": ToolText(
        "Past ops handoffs",
        "Use to see who led a group when: its ops transfers, newest first, with their status and when each was"
        " acknowledged.",
        params={"group_id": GROUP_ID, "limit": "Maximum handoffs (1–500; default 50)."},
    ),
    "handoff_brief": ToolText(
        "Brief for a (new) ops",
        "Use first after taking over a group: the latest handoff, the group's most important and recent "
        "memory within max_tokens, the open todos and the working state handed to you. Members only.",
        params={"group_id": GROUP_ID, "max_tokens": "Token budget of the rendered memory (64–100000; default 1500)."},
    ),
    # --- key-value memory ----------------------------------------------------------------------------
    "learn": ToolText(
        "Remember a key-value note",
        "Use for a fact you will look up by exact name later (recall): stores a value under a key in your "
        "private key-value memory, e.g. 'build.command' = 'make test'; learning a key again replaces it. "
        "What others should find by meaning belongs in create_bead.",
        params={
            "key": "The name to file it under (at most 256 characters, not starting with whitespace).",
            "value": "The value (at most 64 KiB).",
            "metadata": "Optional JSON object of extra attributes.",
            "if_version": IF_VERSION + " The version is in recall's answer; 0 stores only if the key is new.",
        },
    ),
    "recall": ToolText(
        "Look up a key-value note",
        "Use to look up a value you stored with learn, by its exact key; not_found if nothing was learnt "
        "under it. To search keys, values and beads by words, use unified_recall.",
        params={
            "key": "The exact key used with learn.",
            "max_length": "Optional: truncate the value to this many characters.",
        },
    ),
    "unified_recall": ToolText(
        "Search notes and memories",
        "Use when you do not remember whether you learnt something as a key-value note or stored it as a "
        "bead: searches both, notes sharing words with the query plus what search_beads finds.",
        params={
            "query": "What you are looking for.",
            "limit": "Maximum notes and maximum bead hits (1–100; default 10).",
            "filters": "Constraints on the beads. " + FILTERS,
        },
    ),
    "promote_to_bead": ToolText(
        "Turn a note into a memory",
        "Use to share a key-value note you learnt: turns it into a bead (title = key, content = value), e.g. "
        "with visibility='group'. Promoting the same value again returns the same bead.",
        params={
            "key": "The key of the note.",
            "bead_type": "Kind of memory: fact, decision, observation, finding, todo, handoff, summary, note, "
            "question or event.",
            "visibility": VISIBILITY,
            "group_id": "Group of the bead (required with visibility='group'); you must be a member.",
            "importance": "0–10; 5 is normal.",
            "tags": "Labels for the bead (at most 32).",
        },
    ),
    # --- change feed ---------------------------------------------------------------------------------
    "changes_since": ToolText(
        "What changed in a group",
        "Use to catch up on what your team did while you were away: the changes to a group's beads (or global"
        " ones, scope='global') after a cursor, oldest first. Keep the returned cursor and pass it next time.",
        params={
            "scope": "A group id you belong to, or 'global'.",
            "cursor": "The cursor returned by your previous call; omit to start from the beginning.",
            "limit": "Maximum changes (1–1000; default 200).",
        },
    ),
    # --- audit ---
    "audit_log": ToolText(
        "Read a group's audit trail",
        "Use as a group's ops to see who read and wrote the group's memories, when, and whether the hub "
        "allowed it (refusals carry their error code). Newest first. Members who are not ops are refused.",
        params={
            "group_id": "The group ('g_…') you are ops of.",
            "member": "Only this current member's entries ('a_…' or 'o_…').",
            "bead_id": "Only entries naming this bead of the group.",
            "limit": "Maximum number of entries (1–1000; default 100).",
        },
    ),
}
