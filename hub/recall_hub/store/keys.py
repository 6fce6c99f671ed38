"""Every Redis key the hub uses, namespaced by the graph name.

``RECALL_GRAPH_NAME`` isolates one hub from another sharing the same Redis: key-value memory, change
logs, audit, applied events, vector sets and the outbox's bookkeeping all live under
``recall:<graph>:``. No other module spells a Redis key.
"""

from __future__ import annotations

import hashlib
import re

_SCOPE = r"global|(?:group|private):[^:]+"
_LEGACY = re.compile(
    rf"^recall:(?:kv:(?P<kv>[^:]+)|audit:(?P<audit>ai|bead):(?P<audited>.+)|changes:(?P<changes>{_SCOPE})"
    rf"|vec:(?P<model>[0-9a-f]{{10}}):(?P<vec_scope>{_SCOPE}))$"
)
LEGACY_PATTERNS = ("recall:kv:*", "recall:audit:*", "recall:changes:*", "recall:vec:*")
"""Where the first release kept keys, before they were namespaced by the graph name (SCAN MATCH)."""
LEGACY_APPLIED_EVENTS = "recall:events:applied"
"""The first release's set of applied event ids (``<publisher>:<event_id>``), never expired."""


def is_legacy_key(key: str) -> bool:
    """A key of the first release's layout (see :meth:`Keys.from_legacy`)."""
    return _LEGACY.fullmatch(key) is not None

GRAPH_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


BACKED_UP = ("kv", "changes", "audit", "outbox:done")
"""The key families a backup holds (relative to the graph's namespace): key-value memory, change logs,
audit streams, and the step markers of unfinished outbox entries. Every other key is derived or
operational (vector sets, the index log, applied event ids, locks, the membership counter)."""


def backed_up_family(name: str) -> str | None:
    """The family of :data:`BACKED_UP` a relative key name belongs to, if any."""
    return next((family for family in BACKED_UP if name.startswith(f"{family}:") and len(name) > len(family) + 1), None)


class Keys:
    def __init__(self, graph_name: str) -> None:
        if not GRAPH_NAME.fullmatch(graph_name):
            raise ValueError(f"graph name {graph_name!r}: use 1-64 letters, digits, '_' or '-'")
        self.graph_name = graph_name
        self.root = f"recall:{graph_name}"

    def pattern(self) -> str:
        """Every key of this hub (SCAN MATCH)."""
        return f"{self.root}:*"

    def kv(self, ai_id: str) -> str:
        return f"{self.root}:kv:{ai_id}"

    def changes(self, scope: str) -> str:
        return f"{self.root}:changes:{scope}"

    def audit_ai(self, ai_id: str) -> str:
        return f"{self.root}:audit:ai:{ai_id}"

    def audit_bead(self, bead_id: str) -> str:
        return f"{self.root}:audit:bead:{bead_id}"

    def applied_event(self, publisher: str, event_id: str) -> str:
        return f"{self.root}:events:applied:{publisher}:{event_id}"

    def outbox_done(self, entry_id: str, step: str) -> str:
        return f"{self.root}:outbox:done:{entry_id}:{step}"

    def index_log(self) -> str:
        return f"{self.root}:index:log"

    def handed_off(self) -> str:
        """The creates whose after-commit work was handed off and is not done yet, by when (store/outbox.py)."""
        return f"{self.root}:outbox:handed_off"

    def membership_version(self) -> str:
        return f"{self.root}:membership:version"

    def replica_barrier(self) -> str:
        """What a write request increments before ``WAIT`` (store/replica.py): WAIT counts a connection's writes."""
        return f"{self.root}:replica:barrier"

    def lock(self, name: str) -> str:
        return f"{self.root}:lock:{name}"

    def vector_root(self, model_id: str | None = None) -> str:
        """The vector sets of one embedding model (or, with None, of every model)."""
        return self._model_root("vec", model_id)

    def _model_root(self, kind: str, model_id: str | None) -> str:
        if model_id is None:
            return f"{self.root}:{kind}"
        return f"{self.root}:{kind}:{hashlib.sha1(model_id.encode()).hexdigest()[:10]}"

    def vectors(self, model_id: str, scope: str) -> str:
        return f"{self.vector_root(model_id)}:{scope}"

    def token_root(self, model_id: str | None = None) -> str:
        """The token signs of one embedding model's beads (or, with None, of every model's)."""
        return self._model_root("tok", model_id)

    def token_signs(self, model_id: str, scope: str) -> str:
        """A hash of the beads of ``scope``: each bead's token signs (store/vectors.py, ``BeadVectors.tokens``)."""
        return f"{self.token_root(model_id)}:{scope}"

    def scratch(self, name: str) -> str:
        """A key for a measurement's throw-away data (the vector study), never read by a hub."""
        return f"{self.root}:scratch:{name}"

    # --- backups (store/backup.py) ----------------------------------------------------------------

    def backup_copies(self, token: str) -> str:
        """Where one backup keeps its point-in-time copies of this graph's keys while it reads them."""
        return f"{self.root}:backup:{token}"

    def backup_copy(self, token: str, name: str) -> str:
        """The copy one backup made of the key named ``name`` (relative to the namespace: ``kv:a_x``)."""
        return f"{self.backup_copies(token)}:{name}"

    def family_pattern(self, family: str) -> str:
        """Every key of one family of :data:`BACKED_UP` (SCAN MATCH)."""
        return f"{self.root}:{family}:*"

    def absolute(self, name: str) -> str:
        """The key of this graph a backup file names ``name``, relative to the namespace (``kv:a_x``); only
        a family :data:`BACKED_UP` lists."""
        if backed_up_family(name) is None:
            raise ValueError(f"{name!r} is not a key a backup holds")
        return f"{self.root}:{name}"

    @staticmethod
    def outbox_entry_of(name: str) -> str | None:
        """The outbox entry a step marker (relative name ``outbox:done:<entry>:<step>``) belongs to."""
        parts = name.split(":", 3)
        return parts[2] if len(parts) == 4 and parts[:2] == ["outbox", "done"] else None

    def from_legacy(self, key: str) -> str | None:
        """This graph's key for a key of the first release's layout; None for any other key (a key of
        this layout never matches: its second part is a graph name followed by a kind)."""
        m = _LEGACY.fullmatch(key)
        if m is None:
            return None
        if m["kv"] is not None:
            return self.kv(m["kv"])
        if m["audit"] is not None:
            return self.audit_ai(m["audited"]) if m["audit"] == "ai" else self.audit_bead(m["audited"])
        if m["changes"] is not None:
            return self.changes(m["changes"])
        return f"{self.root}:vec:{m['model']}:{m['vec_scope']}"

    @staticmethod
    def vector_sets_pattern(graph_name: str = "*") -> str:
        """Every vector set of one graph (or, by default, of any graph) (SCAN MATCH)."""
        return f"recall:{graph_name}:vec:*"

    @staticmethod
    def scope_of_vector_set(key: str) -> str:
        """The visibility scope a vector set key holds (``global``, ``group:<id>``, ``private:<id>``)."""
        return key.split(":", 4)[-1]
