"""Commits of a git repository as beads: message, author and changed paths; each commit ``FOLLOWS_FROM``
its first parent (the branch's previous commit). Keyed by commit sha, so a rerun stores nothing twice.

A commit the hub will not store or show is skipped, with the reason in :attr:`GitReport.skipped`, and the
chain steps over it: the next commit follows the nearest earlier commit whose bead the caller has. That
covers a commit whose bead was forgotten (the deny-list refuses its content again) and one whose bead
exists but the caller no longer sees (moved to a group it left). A commit whose bead was deleted is
stored again: deleting does not keep content out, forgetting does."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recall_schemas import FORGOTTEN_REASON, ErrorBody, ErrorCode, ErrorReply, NotFound, RelType, error_from_reply

from ..client import RecallClient
from .git_log import Commit, ancestors, branch_log, open_repository

log = logging.getLogger(__name__)

MAX_PATHS = 200
MAX_BODY_CHARS = 200_000
WALK_BACK = 64
"""How many commits before the collected ones are tried, nearest first, to join the chain to."""


@dataclass
class Skipped:
    sha: str
    subject: str
    reason: str

    def __str__(self) -> str:
        return f"skipped commit {self.sha[:12]} {self.subject[:60]!r}: {self.reason}"


@dataclass
class GitReport:
    commits: int = 0
    created: int = 0
    linked: int = 0
    bead_ids: dict[str, str] = field(default_factory=dict)
    """Bead id by commit sha."""
    skipped: list[Skipped] = field(default_factory=list)
    """The commits not stored (or not found again), with why; the chain steps over them."""
    branch: str = ""


def _bead(commit: Commit, repo: str, branch: str, authors: Mapping[str, str], **scope: Any) -> dict[str, Any]:
    paths = commit.paths[:MAX_PATHS]
    changed = "\n".join(f"- {p}" for p in paths) + (f"\n- … {len(commit.paths) - MAX_PATHS} more" if
                                                    len(commit.paths) > MAX_PATHS else "")
    # The sha makes every commit's text its own: forgetting one commit must not refuse another one that
    # changed the same files with the same (or no) message.
    content = "\n\n".join(part for part in (
        commit.body[:MAX_BODY_CHARS], f"Changed:\n{changed}" if paths else "", f"Commit {commit.sha}") if part)
    metadata: dict[str, Any] = {
        "collector": "git", "repo": repo, "commit": commit.sha, "branch": branch, "subject": commit.subject,
        "author_email": commit.email, "author": commit.author, "authored_at": commit.date, "paths": paths,
    }
    ai = authors.get(commit.email.casefold())
    if ai:
        metadata["author_ai"] = ai
    return {
        "title": (commit.subject or commit.sha)[:512], "content": content, "bead_type": "event",
        "provenance": "observed", "tags": ["git"], "metadata": metadata, "idempotency_key": f"git:{commit.sha}",
        **scope,
    }


def _skip_reason(error: ErrorBody) -> str | None:
    """Why a refused commit is skipped, or None when the refusal is an error of the whole run."""
    if error.code is ErrorCode.CONFLICT and error.details.get("reason") == FORGOTTEN_REASON:
        how = "its content" if error.details.get("match") != "similar" else "content too close to it"
        return f"forgotten (the deny-list refuses {how})"
    if error.code is ErrorCode.NOT_FOUND:
        return "stored before, but its bead is no longer visible to this identity"
    return None


class _Collector:
    def __init__(self, client: RecallClient, repo: Path, name: str, branch: str, authors: Mapping[str, str],
                 scope: dict[str, Any]) -> None:
        self.client, self.repo, self.name, self.branch = client, repo, name, branch
        self.authors, self.scope = authors, scope
        self.member_checked = False

    async def store(self, commits: Sequence[Commit], report: GitReport) -> dict[str, str]:
        """Store (or find again) ``commits``; their bead ids by sha. The refused ones go to ``report.skipped``."""
        if not commits:
            return {}
        items = await self.client.create_beads(
            [_bead(c, self.name, self.branch, self.authors, **self.scope) for c in commits]
        )
        stored: dict[str, str] = {}
        for commit, item in zip(commits, items, strict=True):
            if item.error is not None:
                await self._skip(commit, item.error, report)
                continue
            assert item.bead_id is not None
            stored[commit.sha] = item.bead_id
            report.created += item.created
        return stored

    async def _skip(self, commit: Commit, error: ErrorBody, report: GitReport) -> None:
        reason = _skip_reason(error)
        if reason is None:
            raise error_from_reply(ErrorReply(error=error.model_copy(
                update={"message": f"commit {commit.sha[:12]}: {error.message}"})))
        if error.code is ErrorCode.NOT_FOUND:
            await self._check_membership()  # "not found" for a group the caller is not in is the run's error
        skipped = Skipped(commit.sha, commit.subject, reason)
        log.debug("%s", skipped)
        report.skipped.append(skipped)

    async def _check_membership(self) -> None:
        group_id = self.scope.get("group_id")
        if group_id is None or self.member_checked:
            return
        if group_id not in {g.group_id for g in await self.client.list_groups()}:
            raise NotFound(f"group {group_id} not found (or {self.client.ai_id} is not a member)")
        self.member_checked = True

    async def join(self, sha: str, report: GitReport) -> str | None:
        """The bead of ``sha`` or of its nearest first-parent ancestor that can be stored or found again."""
        for commit in await ancestors(self.repo, sha, WALK_BACK):
            found = await self.store([commit], report)
            if commit.sha in found:
                return found[commit.sha]
        return None

    async def link(self, later: str, earlier: str, report: GitReport) -> None:
        try:
            await self.client.add_relationship(
                later, earlier, RelType.FOLLOWS_FROM, metadata={"collector": "git", "branch": self.branch},
            )
        except NotFound:  # deleted or forgotten since it was stored a moment ago
            log.warning("commit bead %s or %s is gone: not linked", later, earlier)
            return
        report.linked += 1


async def collect_git(
    client: RecallClient,
    repo: str | Path = ".",
    *,
    since: str | None = None,
    authors: Mapping[str, str] | None = None,
    **scope: Any,
) -> GitReport:
    """Store the commits of ``repo``'s current branch (after ``since`` when given, oldest first) and link
    each ``FOLLOWS_FROM`` the nearest earlier commit stored. ``repo``: any folder of the working tree
    (relative to the working directory, ``~`` expanded). ``authors`` maps author emails to AI ids (kept as
    ``metadata.author_ai``); ``scope``: visibility, group_id, session_id (default private). Commits the hub
    refuses or no longer shows are in ``skipped``; any other refusal raises it. A git command that fails
    (not a repository, an unknown ``since``) is :class:`~recall_client.collect.git_log.GitError`."""
    repository = await open_repository(repo)
    report = GitReport(branch=repository.branch)
    if not repository.has_commits:
        return report
    authors = {email.casefold(): ai for email, ai in (authors or {}).items()}
    collector = _Collector(client, repository.root, repository.root.name, repository.branch, authors, scope)
    commits = await branch_log(repository.root, since)
    report.commits = len(commits)
    if not commits:
        return report
    stored = await collector.store(commits, report)
    report.bead_ids.update(stored)
    # The nearest bead at or before each commit; before the first collected one, the branch's earlier
    # history is found again (or stored), so a rerun with --since joins the chain.
    nearest: dict[str, str | None] = {}
    first_parent = commits[0].parents[:1]
    if first_parent:
        nearest[first_parent[0]] = await collector.join(first_parent[0], report)
    for commit in commits:
        earlier = nearest.get(commit.parents[0]) if commit.parents else None
        bead_id = stored.get(commit.sha)
        if bead_id is not None and earlier is not None:
            await collector.link(bead_id, earlier, report)
        nearest[commit.sha] = bead_id or earlier
    return report
