"""Texts of the tools over memory itself: beads, recall, listings, relationships, maintenance, the
lifecycle of a bead (trust, supersede, history, forget) and capture."""

from __future__ import annotations

from .shared import (
    AS_OF,
    BEAD_ID,
    DIRECTION,
    FILTERS,
    GROUP_ID,
    IF_VERSION,
    LIMIT,
    REL_TYPES,
    SESSION_ID,
    VISIBILITY,
    ToolText,
)

MEMORY_TEXTS: dict[str, ToolText] = {
    # --- beads ---------------------------------------------------------------------------------------
    "create_bead": ToolText(
        "Remember something",
        "Use when you learn something that should outlive this conversation: a decision and its reason, a "
        "finding, a fact, a todo, a handoff note. One idea per bead: a specific, searchable title, details "
        "in content. Search first to avoid a duplicate; to revise a memory use update_bead. Share with "
        "visibility='group' and a group_id (list_groups). Never store secrets. Returns the bead and its id.",
        params={
            "title": "Short, specific, searchable summary, e.g. 'Payments retry: 3 tries with 2^n s backoff'.",
            "content": "The memory in full: details, reasons, evidence, commands, links. Plain text or Markdown.",
            "bead_type": "Kind of memory: fact, decision, observation, finding, todo, handoff, summary, note, "
            "question or event.",
            "importance": "0–10; 5 is normal, 8 or more only for what others must not miss. A bounded ranking "
            "prior, never a filter.",
            "tags": "Labels to file the bead under and list it by (get_by_tag), e.g. ['payments', 'retry']. "
            "Letters, digits and _ . : / - ; at most 32.",
            "session_id": "Your current work session, 's_…'. Beads of a session are linked in order "
            "(get_by_session). A session belongs to the agent that first used it.",
            "subsession_id": "Optional finer label inside the session, e.g. a sub-task name.",
            "group_id": "Group the bead belongs to (required with visibility='group'); you must be a member.",
            "visibility": VISIBILITY,
            "metadata": "Optional JSON object of extra attributes (e.g. {'source': 'docs/api.md'}). Keys "
            "starting with '_recall' are reserved.",
            "provenance": "How you know it: 'observed' (seen directly, e.g. command output), 'authored' "
            "(your own conclusion; default), 'recorded' (copied from a source), 'derived' (inferred or "
            "summarised). Stronger provenance ranks higher.",
            "valid_from": "Optional ISO 8601 time with zone when the fact starts to hold in the world.",
            "valid_to": "Optional ISO 8601 time with zone when it stops holding (not before valid_from).",
        },
    ),
    "create_beads": ToolText(
        "Remember many things at once",
        "Use to store several memories in one call (the findings of a review, notes taken from a file): up to "
        "256 beads, each checked and stored on its own exactly as create_bead would. The reply has one item per "
        "bead, in order: its bead_id, or the error that kept that bead out (the others are stored).",
        params={
            "beads": "The beads (1–256), each an object with create_bead's parameters: title (required), "
            "content, bead_type, importance, tags, session_id, group_id, visibility, metadata, provenance, …. "
            "Give each an idempotency_key (any string unique to it) so that sending the batch again stores "
            "nothing twice.",
        },
    ),
    "get_bead": ToolText(
        "Read a memory",
        "Use when you have a bead_id and need the whole memory. A bead you may not see is reported as not "
        "found, exactly like one that does not exist.",
        params={"bead_id": BEAD_ID, "as_of": AS_OF},
    ),
    "update_bead": ToolText(
        "Change a memory",
        "Use to correct, extend, retire (status='archived') or share (visibility='group') a memory you "
        "created or whose group you are ops of; fields left out of `updates` stay as they are. When a "
        "decision is replaced rather than corrected, create the new bead and link it UPDATES the old one.",
        params={
            "bead_id": BEAD_ID,
            "updates": "Object with only the fields to change: title, content, bead_type, importance, tags "
            "(replaces the list), metadata (replaces the object), status ('active'/'archived'), visibility, "
            "group_id, valid_from/valid_to (ISO 8601 with zone; null clears).",
            "if_version": IF_VERSION + " Give it whenever others may edit the same memory.",
        },
    ),
    "edit_bead": ToolText(
        "Tag, annotate or re-weigh a memory",
        "Use to add or remove tags, set or remove metadata keys, or raise or lower importance of a memory you "
        "created or whose group you are ops of, without reading it first: the hub applies the change to the "
        "memory as it is now, so edits by other agents at the same moment are never lost (prefer it to "
        "update_bead for these fields).",
        params={
            "bead_id": BEAD_ID,
            "add_tags": "Tags to add (kept once); a bead carries at most 32.",
            "remove_tags": "Tags to remove, if present.",
            "set_metadata": "JSON object of metadata keys to set; the bead's other keys stay.",
            "remove_metadata": "Metadata keys to remove, if present.",
            "add_importance": "Added to importance (−10..10; negative lowers it); the result stays within 0–10.",
            "if_version": IF_VERSION,
        },
    ),
    "delete_bead": ToolText(
        "Delete a memory",
        "Use only to remove a memory for good (with its relationships); only its creator or the group's ops "
        "may, and it cannot be undone. To retire a memory that may still explain history, archive it with "
        "update_bead instead.",
        params={"bead_id": BEAD_ID},
    ),
    # --- recall --------------------------------------------------------------------------------------
    "search_beads": ToolText(
        "Search memory",
        "Use before a task or before storing a bead, when you need individual memories with their scores: "
        "finds what you may see (private, your groups', global) by meaning and keywords, best first, each "
        "hit with the full bead and how it was ranked. For a ready-to-read block within a token budget use "
        "`context`; for causes and consequences, `why`.",
        params={
            "query": "What you are looking for, in natural language or keywords (ids and error strings work "
            "best with mode='keyword').",
            "limit": LIMIT + " Default 20.",
            "filters": FILTERS,
            "mode": "'hybrid' (default; best in general), 'keyword' (exact words, identifiers, error "
            "messages) or 'vector' (meaning only).",
            "max_tokens": "Optional token budget: return only the best hits whose beads fit in it.",
            "use_priors": "Weigh importance, recency, provenance and status into the ranking (bounded). "
            "False ranks by relevance alone.",
            "as_of": AS_OF,
        },
    ),
    "context": ToolText(
        "Memory context for a task",
        "Use at the start of a task to load what the team knows: the most relevant memory for a query as "
        "one text block within a token budget, each entry with its type, date, author and bead_id. Use "
        "search_beads instead when you need scores or want to act on individual beads.",
        params={
            "query": "The task or question the context is for.",
            "max_tokens": "Token budget of the whole block (16–200000; default 1000).",
            "filters": FILTERS,
            "max_per_source": "At most this many beads cut from one source (beads sharing metadata.source, "
            "e.g. one document), so a single source cannot crowd out the rest (1–50; default 2).",
        },
    ),
    "why": ToolText(
        "Explain the background",
        "Use for 'why did we…', 'what led to…', 'what happened after…': the beads closest to the query, "
        "then the typed relationships around them up to `hops` steps — causes, decisions and follow-ups "
        "a similarity search alone misses. Nodes carry their depth, edges their type.",
        params={
            "query": "The topic or question to explain.",
            "hops": "How many relationship steps to follow from the seeds (0–4; default 2).",
            "rel_types": REL_TYPES,
            "seeds": "How many best-matching beads to start from (1–20; default 3).",
            "limit": "Maximum beads in the returned subgraph (1–500; default 50).",
            "filters": "Constraints on the seeds. " + FILTERS,
        },
    ),
    "find_similar": ToolText(
        "Similar memories",
        "Use before creating, merging or linking, to spot duplicates or related work: the beads whose meaning"
        " is closest to a given bead (cosine similarity at least `threshold`), most similar first.",
        params={
            "bead_id": BEAD_ID,
            "threshold": "Minimum cosine similarity, -1 to 1 (default 0.7; 0.9 or more means near-duplicate).",
            "limit": "Maximum results (1–500; default 10).",
        },
    ),
    # --- listings ------------------------------------------------------------------------------------
    "get_recent": ToolText(
        "Recent memories",
        "Use for a quick 'what happened lately': the most recently created memories you may see (private, "
        "group and global), newest first.",
        params={
            "limit": "Maximum beads (1–500; default 10).",
            "since": "Optional ISO 8601 time: only beads created at or after it.",
            "as_of": AS_OF,
        },
    ),
    "get_by_session": ToolText(
        "Memories of a session",
        "Use to replay one work session, to resume work or prepare a handoff: every bead of it you may see, "
        "oldest first.",
        params={"session_id": SESSION_ID, "limit": LIMIT + " Default 100.", "as_of": AS_OF},
    ),
    "get_by_group": ToolText(
        "Memories of a group",
        "Use to list one of your groups' memories, newest first. Only members may list a group; to anyone "
        "else it does not exist.",
        params={"group_id": GROUP_ID, "limit": LIMIT + " Default 100.", "as_of": AS_OF},
    ),
    "get_by_tag": ToolText(
        "Memories with a tag",
        "Use to list everything filed under one label: the beads you may see with a tag, newest first. To "
        "combine tags with a query, use search_beads with filters.tags.",
        params={
            "tag": "The tag, exactly as stored (case-sensitive).",
            "limit": LIMIT + " Default 100.",
            "as_of": AS_OF,
        },
    ),
    # --- relationships -------------------------------------------------------------------------------
    "add_relationship": ToolText(
        "Link two memories",
        "Use to connect two beads you can see with a directed edge from_id → to_id: FOLLOWS_FROM (came "
        "after or because of), RELATED_TO (same subject), UPDATES (supersedes; the old one ranks lower), "
        "PART_OF (a piece of). The hub already links a session's beads in order and similar beads.",
        params={
            "from_id": "The bead the edge starts at. " + BEAD_ID,
            "to_id": "The bead the edge points to; must differ from from_id.",
            "rel_type": "FOLLOWS_FROM, RELATED_TO, UPDATES or PART_OF.",
            "properties": "Optional: strength (0–1), similarity (-1 to 1), replaces (true when from_id "
            "fully replaces to_id), metadata (JSON object).",
        },
    ),
    "get_relationships": ToolText(
        "Links of a memory",
        "Use to see how one bead is linked: its edges — type, direction, properties, who linked them and when"
        " — to beads you may see.",
        params={
            "bead_id": BEAD_ID,
            "rel_type": "Only edges of this type (FOLLOWS_FROM, RELATED_TO, UPDATES, PART_OF); default all.",
            "direction": DIRECTION,
        },
    ),
    "get_edges": ToolText(
        "Links among many memories",
        "Use to see how a set of beads hang together in one call (e.g. the results of a search or a listing): "
        "every edge out of them to beads you may see.",
        params={
            "bead_ids": "Ids of the beads (up to 500); ids you cannot see add nothing.",
            "rel_types": "Only edges of these types; default all.",
        },
    ),
    "traverse_graph": ToolText(
        "Walk the memory graph",
        "Use when you start from a bead (not a question) and want what is connected to it: a breadth-first "
        "walk returning the beads reached, with their depth, and the edges between them; it never passes "
        "through a bead you may not see.",
        params={
            "start_id": "The bead to start from. " + BEAD_ID,
            "max_depth": "Maximum hops from the start (1–6; default 3).",
            "rel_types": REL_TYPES,
            "direction": DIRECTION,
            "limit": "Maximum beads returned (1–500; default 200).",
            "as_of": AS_OF,
        },
    ),
    # --- maintenance ---------------------------------------------------------------------------------
    "deduplicate_beads": ToolText(
        "Find or merge duplicates",
        "Use to find clusters of duplicate memories you may see: exact, and with similarity_threshold "
        "near-duplicates. Review with merge=false (default); merge=true keeps each cluster's oldest bead, "
        "records every author on it and archives the others you may change.",
        params={
            "bead_id": "Only the cluster of this bead.",
            "group_id": "Only beads of this group.",
            "similarity_threshold": "Also cluster near-duplicates whose cosine similarity reaches this, "
            "e.g. 0.95 (0–1). Omit for exact duplicates only.",
            "merge": "Merge each cluster (see above). Default false: only report.",
        },
    ),
    "rank_by_importance": ToolText(
        "Rank memories by importance",
        "Use to order a list of beads by importance, highest first (newest first on ties); beads you may not "
        "see are left out.",
        params={"bead_ids": "Ids of the beads to rank (1–500)."},
    ),
    "decay_old_memories": ToolText(
        "Archive stale memories",
        "Use to tidy up: archives (never deletes) the active beads you may change that nobody read or changed"
        " for threshold_days. Run with dry_run=true first; archived beads stay readable but rank lower.",
        params={
            "threshold_days": "Days without a read or change (default 90).",
            "dry_run": "Only report what would be archived.",
        },
    ),
    # --- lifecycle: trust, supersede, history ---
    "verify_bead": ToolText(
        "Vouch for a memory",
        "Use after checking that a memory someone else wrote is right: records you as its verifier (with an "
        "optional note), which makes it rank a little higher. Verifying again changes nothing; your own beads "
        "cannot be verified by you.",
        params={"bead_id": "The bead you checked. " + BEAD_ID, "note": "Optional: what you checked, or how."},
    ),
    "reject_bead": ToolText(
        "Mark a memory as wrong",
        "Use when a memory someone else wrote is wrong: records your rejection and reason; the bead stays "
        "readable but ranks lower in every search, and search explanations say it was rejected. If you have "
        "the right answer, store it and use supersede_bead.",
        params={"bead_id": "The wrong bead. " + BEAD_ID, "reason": "Why it is wrong (required)."},
    ),
    "list_stale": ToolText(
        "Memories due for a re-check",
        "Use to find memories worth re-checking: unverified beads of weak provenance (recorded, derived) older "
        "than older_than_days, and beads whose source (metadata.source_bead_id) was superseded or is gone. "
        "Each comes with its causes; verify, reject or supersede them.",
        params={
            "group_id": "Optional: only this group's beads. " + GROUP_ID,
            "older_than_days": "Age after which an unverified weak bead counts as stale (default 30).",
            "limit": LIMIT + " Default 50.",
            "cursor": "The next_cursor of a previous reply, to continue; omit to start from the oldest.",
        },
    ),
    "supersede_bead": ToolText(
        "Replace a memory by a newer one",
        "Use when a memory is outdated and you stored its replacement: links new_id UPDATES old_id, so the old "
        "one ranks lower everywhere but stays readable. You need the right to change the old bead (its creator "
        "or the group's ops). Repeating it changes nothing.",
        params={
            "old_id": "The outdated bead. " + BEAD_ID,
            "new_id": "The bead that replaces it; must differ from old_id.",
            "reason": "Optional: why it was replaced.",
        },
    ),
    "get_history": ToolText(
        "Versions of a memory",
        "Use to see how a memory changed over time: its older and newer versions you may see, oldest first "
        "(offset < 0 older, > 0 newer), and who replaced which, when and why.",
        params={"bead_id": BEAD_ID, "limit": "Maximum versions returned (1–200; default 50)."},
    ),
    # --- lifecycle: forget ---
    "forget_bead": ToolText(
        "Forget a memory for good",
        "Use when a memory must not exist any more (a leaked secret, personal data, a retraction): removes its "
        "content, vectors and links and leaves a tombstone (who, when, why). Unless allow_again, the same or "
        "nearly the same content is refused in that scope from then on. Only the creator or the group's ops.",
        params={
            "bead_id": BEAD_ID,
            "reason": "Why it is forgotten, kept on the tombstone (never repeat the content here).",
            "allow_again": "True: the same content may be stored again later; default false (refused).",
        },
    ),
    "forget_by_author": ToolText(
        "Forget everything an identity wrote",
        "Use when an identity leaves and its memories must go: forgets every bead it created in the groups "
        "you are ops of (or, for your own id, all of yours). Others' beads are untouched. Returns counts.",
        params={
            "ai_id": "The identity whose beads are forgotten ('a_…' or 'o_…').",
            "reason": "Why, kept on each tombstone.",
            "allow_again": "True: the same contents may be stored again later; default false (refused).",
        },
    ),
    "list_forgotten": ToolText(
        "List forgotten memories",
        "Use to review what was forgotten: the tombstones (bead id, content hash, who, when, why, still "
        "refused or not) of beads you forgot or of groups you are ops of. Never shows the forgotten content.",
        params={"group_id": "Only this group's tombstones (you must be a member).", "limit": LIMIT},
    ),
    "allow_forgotten": ToolText(
        "Allow forgotten content again",
        "Use to lift the refusal a forget left: the same content may then be stored again in that scope. Only "
        "who forgot the bead or the group's ops. The forgotten bead itself does not come back.",
        params={"bead_id": "Id of the forgotten bead, as listed by list_forgotten."},
    ),
    # --- capture: extraction, collectors ---
    "remember_extracted": ToolText(
        "Remember the facts of a text",
        "Use to store what a longer text (notes, a transcript, a report) says: the hub splits it into facts by "
        "topic, each a bead linked PART_OF one topic hub per topic, in one step. Sending the same text again "
        "stores nothing new. For one idea you wrote yourself, create_bead is simpler.",
        params={
            "text": "The text to extract facts from (at most 256 KiB).",
            "visibility": VISIBILITY,
            "group_id": "Group of the beads (required with visibility='group'); you must be a member.",
            "session_id": SESSION_ID,
            "max_facts": "At most this many facts are stored (1–256; default 50).",
            "importance": "0–10 for every fact; 5 is normal.",
            "tags": "Labels put on every fact (at most 32).",
        },
    ),
    "remember_topics": ToolText(
        "Remember facts under topics",
        "Use when you have already split knowledge by topic (sections of a document, say): stores each fact as "
        "a bead PART_OF its topic's hub, atomically. A fact with a key replaces the text stored under that key "
        "when it changed; without a key, the same fact is never stored twice.",
        params={
            "topics": "[{name, facts: [{title, content, key?, metadata?}]}]: at most 64 topics, 256 facts.",
            "visibility": VISIBILITY,
            "group_id": "Group of the beads (required with visibility='group'); you must be a member.",
            "session_id": SESSION_ID,
            "importance": "0–10 for every fact; 5 is normal.",
            "tags": "Labels put on every fact (at most 32).",
            "bead_type": "Kind of every fact: fact (default), note, decision, … (not 'topic').",
            "provenance": "How you know them: 'recorded' (copied from a source; default), 'observed', "
            "'authored' or 'derived'.",
            "hub_metadata": "JSON object put on topic hubs this call creates.",
        },
    ),
    "recall_where": ToolText(
        "Where was this met",
        "Use to find where a subject came up: the files (documents), commits, sessions and commands (runs) "
        "of the memories about it that you may see, grouped by kind, best first, each with the bead ids.",
        params={
            "query": "The subject, in words or identifiers.",
            "limit": "How many matching beads to look at (1–100; default 30).",
            "filters": FILTERS,
        },
    ),
}
