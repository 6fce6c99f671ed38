"""The forget ledger a restore re-applies: every tombstone (bead id, content hash, scope, deny state and
fingerprint; never content), so that a backup taken before a forget and restored after it does not bring
the forgotten beads back.

Where the ledger comes from: the target's own tombstones when a restore replaces a store (``--force``),
the backup's tombstones, and those of another, newer backup file (``recall restore --forget-ledger``)
for a restore into an empty store that never saw the later forgets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recall_hub.store.backup_records import NodeRecord
from recall_hub.store.erasure import ErasureStore
from recall_hub.store.forget import ForgetStore
from recall_hub.tooling.backup_file import read_records, verify

LABEL = "Tombstone"


def ledger_from_backup(path: Path) -> list[dict[str, Any]]:
    """The tombstones a backup file holds (the file is checked whole first)."""
    verify(path)
    return [r.props for r in read_records(path) if isinstance(r, NodeRecord) and LABEL in r.labels]


async def reapply(store: ForgetStore) -> list[str]:
    """Remove every forgotten bead the restored graph holds and its content from the change logs, and owe
    their erasure from the servers' files again (the running hubs carry it out); the forgotten beads' ids."""
    forgotten = await store.system_apply()
    erasure = ErasureStore(store.graph, store.redis, store.keys)
    await erasure.erase_from_change_logs(forgotten)
    await erasure.system_mark_pending(forgotten)
    return forgotten
