"""Reading a git repository for the git collector: its root, branch and first-parent commits, through the git
command line. A failing git command is :class:`GitError` with git's own message."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path

from recall_schemas import InvalidRequest

_FORMAT = "%x1e%H%x1f%P%x1f%ae%x1f%an%x1f%aI%x1f%s%x1f%b%x1f"
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_QUOTED = re.compile(r'\\([0-7]{3}|.)')


class GitError(InvalidRequest):
    """A git command failed: not a repository, an unknown revision, a folder that is not there."""


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
class Repository:
    root: Path
    """The working tree's top folder, absolute."""
    branch: str
    """The current branch, or ``HEAD`` when detached."""
    has_commits: bool


async def git(repo: Path, *args: str) -> str:
    # core.quotePath=false: non-ASCII paths come verbatim; only odd ones (quotes, control characters) are quoted.
    process = await asyncio.create_subprocess_exec(
        "git", "-c", "core.quotePath=false", "-C", str(repo), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {repo}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


def unquote_path(line: str) -> str:
    """A path as git prints it: verbatim, or C-quoted (``"tab\\there"``, octal bytes) when it holds odd characters."""
    if not (len(line) >= 2 and line.startswith('"') and line.endswith('"')):
        return line
    data = bytearray()
    position = 1
    for match in _QUOTED.finditer(line, 1, len(line) - 1):
        data += line[position : match.start()].encode()
        escape = match.group(1)
        data.append(int(escape, 8) if len(escape) == 3 else _ESCAPES.get(escape, ord("?")))
        position = match.end()
    data += line[position:-1].encode()
    return data.decode(errors="replace")


def parse_log(text: str) -> list[Commit]:
    commits = []
    for record in text.split("\x1e")[1:]:
        sha, parents, email, author, date, subject, body, names = record.split("\x1f")
        paths = [unquote_path(line) for line in names.splitlines() if line.strip()]
        commits.append(Commit(sha, parents.split(), email, author, date, subject, body.strip(), paths))
    return commits


async def open_repository(path: str | Path) -> Repository:
    """The repository holding ``path`` (``~`` expanded; relative to the working directory; any folder of it)."""
    folder = await asyncio.to_thread(lambda: Path(path).expanduser().resolve())
    root = Path((await git(folder, "rev-parse", "--show-toplevel")).strip())
    has_commits = bool((await _git_may_fail(root, "rev-parse", "--verify", "-q", "HEAD")).strip())
    branch = (await _git_may_fail(root, "symbolic-ref", "-q", "--short", "HEAD")).strip() or "HEAD"
    return Repository(root, branch, has_commits)


async def _git_may_fail(repo: Path, *args: str) -> str:
    """Git's output, or nothing when the command fails (a question git answers by its exit status)."""
    try:
        return await git(repo, *args)
    except GitError:
        return ""


async def branch_log(repo: Path, since: str | None) -> list[Commit]:
    """The current branch's commits (first parents; after ``since`` when given), oldest first."""
    revision = f"{since}..HEAD" if since else "HEAD"
    return parse_log(await git(repo, "log", "--reverse", "--first-parent", "--name-only", f"--format={_FORMAT}",
                               revision, "--"))


async def ancestors(repo: Path, sha: str, count: int) -> list[Commit]:
    """``sha`` and its first-parent ancestors, newest first, at most ``count``."""
    return parse_log(await git(repo, "log", "--first-parent", "--name-only", f"-n{count}", f"--format={_FORMAT}",
                               sha, "--"))
