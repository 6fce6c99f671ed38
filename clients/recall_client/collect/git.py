"""Commits of a git repository as beads: message, author and changed paths; each commit ``FOLLOWS_FROM``
its first parent (the branch's previous commit). Keyed by commit sha, so a rerun stores nothing twice."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recall_schemas import InvalidRequest, RelType

from ..client import RecallClient

log = logging.getLogger(__name__)

_FORMAT = "%x1e%H%x1f%P%x1f%ae%x1f%an%x1f%aI%x1f%s%x1f%b%x1f"
MAX_PATHS = 200


@dataclass
class Commit:
    sha: str
    parents: list[str]
    email: str
    author: str
    date: str
    subject: str
    body: str
    paths: list[str] = field(default_factory=list)


@dataclass
class GitReport:
    commits: int = 0
    created: int = 0
    linked: int = 0
    bead_ids: dict[str, str] = field(default_factory=dict)
    """Bead id by commit sha."""


async def _git(repo: Path, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "git", "-C", str(repo), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise InvalidRequest(f"git {' '.join(args)} failed in {repo}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


def parse_log(text: str) -> list[Commit]:
    commits = []
    for record in text.split("\x1e")[1:]:
        sha, parents, email, author, date, subject, body, names = record.split("\x1f")
        paths = [line for line in names.splitlines() if line.strip()]
        commits.append(Commit(sha, parents.split(), email, author, date, subject, body.strip(), paths))
    return commits


def _bead(commit: Commit, repo: str, branch: str, authors: Mapping[str, str], **scope: Any) -> dict[str, Any]:
    paths = commit.paths[:MAX_PATHS]
    changed = "\n".join(f"- {p}" for p in paths) + (f"\n- … {len(commit.paths) - MAX_PATHS} more" if
                                                    len(commit.paths) > MAX_PATHS else "")
    content = "\n\n".join(part for part in (commit.body, f"Changed:\n{changed}" if paths else "") if part)
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


async def collect_git(
    client: RecallClient,
    repo: str | Path = ".",
    *,
    since: str | None = None,
    authors: Mapping[str, str] | None = None,
    **scope: Any,
) -> GitReport:
    """Store the commits of ``repo``'s current branch (after ``since`` when given, oldest first) and link
    each ``FOLLOWS_FROM`` its first parent. ``authors`` maps author emails to AI ids (kept as
    ``metadata.author_ai``); ``scope``: visibility, group_id, session_id (default private)."""
    root = await asyncio.to_thread(lambda: Path(repo).expanduser().resolve())
    authors = {email.casefold(): ai for email, ai in (authors or {}).items()}
    branch = (await _git(root, "rev-parse", "--abbrev-ref", "HEAD")).strip()
    name = (await _git(root, "rev-parse", "--show-toplevel")).strip().rsplit("/", 1)[-1]
    revision = f"{since}..HEAD" if since else "HEAD"
    commits = parse_log(await _git(root, "log", "--reverse", "--first-parent", "--name-only",
                                   f"--format={_FORMAT}", revision))
    known = {c.sha for c in commits}
    # The branch's commit before the first one collected: stored too (or found again), so the chain joins.
    boundary = [c.parents[0] for c in commits[:1] if c.parents and c.parents[0] not in known]
    if boundary:
        commits = parse_log(await _git(root, "log", "-1", "--name-only", f"--format={_FORMAT}", boundary[0])) + commits
    report = GitReport(commits=len(commits) - len(boundary))
    if not commits:
        return report
    items = await client.create_beads([_bead(c, name, branch, authors, **scope) for c in commits])
    for commit, item in zip(commits, items, strict=True):
        if item.error is not None:
            raise InvalidRequest(f"commit {commit.sha[:12]}: {item.error.message}")
        assert item.bead_id is not None
        report.bead_ids[commit.sha] = item.bead_id
        report.created += item.created
    for commit in commits:
        parent = commit.parents[0] if commit.parents else None
        if parent in report.bead_ids:
            await client.add_relationship(
                report.bead_ids[commit.sha], report.bead_ids[parent], RelType.FOLLOWS_FROM,
                metadata={"collector": "git", "branch": branch},
            )
            report.linked += 1
    return report
