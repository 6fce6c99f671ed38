"""Collectors and recall_where, through the client (and the `recall` command line) on real servers.

* git: a repository made with the git CLI; commits become beads linked FOLLOWS_FROM along the branch,
  authors mapped to AI ids; a rerun (and --since) stores nothing twice;
* shell: `recall run -- …` with a script that fails until a marker file exists: the success is linked
  to the failure it fixed; the output tail is kept, bounded;
* docs: a Markdown tree; sections PART_OF their document's hub; a rerun updates changed sections only;
* recall_where groups the places of the matching visible beads by kind; collected beads are private by
  default: another identity sees none of them on any path.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ClientFactory
from recall_client import NotFound, RecallClient
from recall_client.collect import collect_docs, collect_git, markdown_sections
from recall_client.collect.shell import TAIL_BYTES, command_tag
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import BeadType

pytestmark = pytest.mark.timeout(180)
RECALL = Path(sys.executable).parent / "recall"


def word() -> str:
    return "zq" + secrets.token_hex(4)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, path: str, text: str, message: str, email: str = "alice@example.com") -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git(repo, "add", path)
    git(repo, "-c", f"user.email={email}", "-c", "user.name=Someone", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


async def run(*command: str) -> Ran:
    """A process run without blocking the event loop (the hub under test serves on it)."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())


async def recall(stack: EmbeddedStack, ai: str, *args: str) -> Ran:
    """``recall <command> [<subcommand>] --ai <ai> --nats <the stack's> <args>``."""
    words = 1 if args[0] == "run" else 2  # `recall run …`, `recall collect git …`
    return await run(str(RECALL), *args[:words], "--ai", ai, "--nats", stack.nats_url, *args[words:])


# --- git ------------------------------------------------------------------------------------------------------


async def test_git_commits_become_beads_linked_along_the_branch(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    a, other = await connect(), await connect()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    topic = word()
    shas = [
        commit(repo, "README.md", "hello", f"Start the {topic} service"),
        commit(repo, "src/api.py", "x = 1", "Add the API", email="bob@example.com"),
        commit(repo, "src/api.py", "x = 2", f"Fix the {topic} timeout\n\nThe client waited forever."),
    ]
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(repo), "--map", f"bob@example.com={other.ai_id}")
    assert ran.returncode == 0, ran.stderr
    assert "3 commit(s): 3 bead(s) created, 2 FOLLOWS_FROM link(s)" in ran.stdout
    beads = {b.metadata["commit"]: b for b in await a.get_by_tag("git")}
    assert set(beads) == set(shas)
    last = beads[shas[2]]
    assert last.title == f"Fix the {topic} timeout" and last.bead_type is BeadType.EVENT
    assert "The client waited forever." in last.content and "- src/api.py" in last.content
    assert last.metadata["paths"] == ["src/api.py"] and last.metadata["repo"] == "repo"
    assert beads[shas[1]].metadata["author_ai"] == other.ai_id and "author_ai" not in last.metadata
    for later, earlier in zip(shas[1:], shas, strict=False):
        edges = await a.get_relationships(beads[later].bead_id, rel_type="FOLLOWS_FROM", direction="out")
        assert [e.to_id for e in edges] == [beads[earlier].bead_id]

    again = await collect_git(a, repo)
    assert (again.commits, again.created) == (3, 0)
    shas.append(commit(repo, "src/api.py", "x = 3", "Tune the retry budget"))
    since = await collect_git(a, repo, since=shas[2])
    assert (since.commits, since.created, since.linked) == (1, 1, 1)
    newest = await a.get_relationships(since.bead_ids[shas[3]], rel_type="FOLLOWS_FROM", direction="out")
    assert [e.to_id for e in newest] == [beads[shas[2]].bead_id]
    assert len(await a.get_by_tag("git")) == 4

    # Private by default: the mapped author sees none of it, on any path.
    for bead in beads.values():
        with pytest.raises(NotFound):
            await other.get_bead(bead.bead_id)
    assert await other.get_by_tag("git") == []
    assert [h for h in (await other.search_beads(topic)).hits if h.bead.created_by == a.ai_id] == []
    assert (await other.recall_where(topic)).commits == []


async def test_git_errors_are_clear(connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path) -> None:
    a = await connect()
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(tmp_path))
    assert ran.returncode != 0 and "not a git repository" in ran.stderr.lower()
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(tmp_path), "--map", "nobody")
    assert ran.returncode == 2 and "EMAIL=AI_ID" in ran.stderr


# --- shell ----------------------------------------------------------------------------------------------------


async def test_a_success_after_a_failure_of_the_same_command_is_linked_as_its_fix(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    a = await connect()
    marker = tmp_path / "fixed"
    script = tmp_path / "check.sh"
    script.write_text(
        f'seq 1 5000\nif [ -e "{marker}" ]; then echo "all good"; exit 0; fi\necho "{word()} broken" >&2; exit 3\n'
    )
    failed = await recall(stack, a.ai_id, "run", "--", "sh", str(script))
    assert failed.returncode == 3 and "broken" in failed.stdout  # the command's output passes through
    marker.touch()
    fixed = await recall(stack, a.ai_id, "run", "--", "sh", str(script))
    assert fixed.returncode == 0 and "fixes the failure" in fixed.stderr

    runs = await a.get_by_tag(command_tag(f"sh {script}"))
    assert [r.metadata["exit_code"] for r in runs] == [0, 3]  # newest first
    success, failure = runs
    assert failure.title.endswith("failed (exit 3)") and "broken" in failure.content
    assert failure.metadata["command"] == f"sh {script}" and failure.metadata["duration_s"] >= 0
    assert len(failure.content) <= TAIL_BYTES + 400 and "\n1\n" not in failure.content  # only the tail
    links = await a.get_relationships(success.bead_id, rel_type="RELATED_TO", direction="out")
    fix = [e for e in links if e.properties.metadata.get("fix")]
    assert [e.to_id for e in fix] == [failure.bead_id]

    # A second success fixes nothing; a command that cannot start is recorded as exit 127.
    again = await recall(stack, a.ai_id, "run", "--", "sh", str(script))
    assert again.returncode == 0 and "fixes" not in again.stderr
    missing = await recall(stack, a.ai_id, "run", "--", str(tmp_path / "no-such-tool"))
    assert missing.returncode == 127


async def test_a_command_run_elsewhere_is_recorded_once_and_its_fix_linked(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    """`recall collect shell` records what a shell hook saw; recording the same run again stores nothing new."""
    a = await connect()
    command = f"make test-{word()}"
    output = tmp_path / "out.txt"
    output.write_text("".join(f"line {i}\n" for i in range(200)) + "FAILED test_x\n")
    failing = ("--command", command, "--exit-code", "2", "--duration", "4.5", "--started-at", "1700000000")
    first = await recall(stack, a.ai_id, "collect", "shell", *failing, "--output", str(output))
    again = await recall(stack, a.ai_id, "collect", "shell", *failing, "--output", str(output))
    assert first.returncode == again.returncode == 0, first.stderr
    runs = await a.get_by_tag(command_tag(command))
    assert len(runs) == 1 and runs[0].metadata["exit_code"] == 2 and runs[0].metadata["duration_s"] == 4.5
    assert "FAILED test_x" in runs[0].content and "line 0\n" not in runs[0].content  # the tail only
    fixed = await recall(stack, a.ai_id, "collect", "shell", "--command", command, "--exit-code", "0",
                         "--started-at", "1700000100")
    assert f"fixes the failure {runs[0].bead_id}" in fixed.stdout


async def test_recall_run_without_a_hub_still_runs_the_command(tmp_path: Path) -> None:
    ran = await run(
        str(RECALL), "run", "--ai", "a_nohub1", "--nats", "nats://127.0.0.1:1", "--timeout", "1", "--",
        "sh", "-c", "echo ran; exit 4",
    )
    assert ran.returncode == 4 and "ran" in ran.stdout and "not recorded" in ran.stderr


# --- docs -----------------------------------------------------------------------------------------------------


def test_markdown_splits_at_headings_outside_code() -> None:
    sections = markdown_sections("Intro text.\n# Install\nRun it.\n```\n# not a heading\n```\n## Linux\napt\n# Use\n",
                                 "guide.md")
    assert [(s.trail, s.text) for s in sections] == [
        ("guide.md", "Intro text."),
        ("Install", "Run it.\n```\n# not a heading\n```"),
        ("Install > Linux", "apt"),
        ("Use", ""),
    ]


async def test_docs_sections_are_part_of_their_document_hub_and_reruns_update_only_changes(
    connect: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, other = await connect(), await connect()
    monkeypatch.chdir(tmp_path)
    topic = word()
    (tmp_path / "docs" / "ops").mkdir(parents=True)
    guide = tmp_path / "docs" / "guide.md"
    guide.write_text(f"# Install\nUse the {topic} installer.\n\n# Upgrade\nStop the service first.\n")
    (tmp_path / "docs" / "ops" / "runbook.md").write_text("# Restart\nsystemctl restart api\n")
    (tmp_path / "docs" / "notes.txt").write_text("# not markdown\n")

    first = await collect_docs(a, tmp_path / "docs")
    assert (first.files, first.sections, first.created, first.updated) == (2, 3, 5, 0)
    hub = first.hubs["docs/guide.md"]
    assert (await a.get_bead(hub)).bead_type is BeadType.TOPIC
    children = await a.traverse_graph(hub, max_depth=1, rel_types=["PART_OF"], direction="in")
    sections = {n.bead.title: n.bead for n in children.nodes if n.bead.bead_id != hub}
    assert set(sections) == {"Install", "Upgrade"}
    assert sections["Install"].metadata["file"] == "docs/guide.md"
    assert sections["Install"].bead_type is BeadType.NOTE

    same = await collect_docs(a, tmp_path / "docs")
    assert (same.created, same.updated) == (0, 0) and same.hubs == first.hubs
    guide.write_text(f"# Install\nUse the {topic} installer, version 2.\n\n# Upgrade\nStop the service first.\n"
                     "\n# Rollback\nRedeploy the previous tag.\n")
    changed = await collect_docs(a, guide)
    assert (changed.created, changed.updated) == (1, 1)
    install = await a.get_bead(sections["Install"].bead_id)
    assert "version 2" in install.content and install.version == 2
    assert (await a.get_bead(sections["Upgrade"].bead_id)).version == 1

    where = await a.recall_where(topic)
    assert [(p.place, p.detail) for p in where.files] == [("docs/guide.md", "Install")]
    assert where.files[0].bead_ids == [sections["Install"].bead_id]
    # Searching the document's name finds its sections, never the hub itself.
    hits = (await a.search_beads("guide.md", mode="keyword")).hits
    assert hits and hub not in {h.bead.bead_id for h in hits}
    # Private by default.
    assert (await other.recall_where(topic)).files == []
    with pytest.raises(NotFound):
        await other.get_bead(hub)


# --- recall_where ---------------------------------------------------------------------------------------------


async def test_recall_where_groups_places_by_kind(connect: ClientFactory, tmp_path: Path) -> None:
    ops, member, stranger = await connect("o_" + secrets.token_hex(6)), await connect(), await connect()
    group = await ops.create_group("where")
    await ops.add_member(group.group_id, member.ai_id)
    topic = word()
    shared = {"visibility": "group", "group_id": group.group_id}
    session = "s_" + secrets.token_hex(6)
    await member.remember_extracted(f"# Notes\n\nThe {topic} cache was cold.", session_id=session, **shared)
    await member.create_bead(f"{topic} deploy", "ran make deploy", metadata={"command": "make deploy",
                                                                             "exit_code": 2}, **shared)
    await member.create_bead(f"{topic} commit", "", metadata={"commit": "abc123", "repo": "svc",
                                                             "subject": f"Warm the {topic} cache"}, **shared)
    doc = tmp_path / "cache.md"
    doc.write_text(f"# Cache\nThe {topic} cache warms at boot.\n")
    await collect_docs(member, doc, **shared)

    where = await member.recall_where(topic)  # the writer: its reads wait for the keyword index to have its writes
    assert [p.place for p in where.sessions] == [session], where
    assert [(p.place, p.detail) for p in where.commands] == [("make deploy", "exit 2")]
    assert [(p.place, p.detail) for p in where.commits] == [("svc@abc123", f"Warm the {topic} cache")]
    assert [p.detail for p in where.files] == ["Cache"]
    assert all(p.bead_ids and p.score > 0 for kind in (where.files, where.commits) for p in kind)
    await ops.remove_member(group.group_id, member.ai_id)
    for outsider in (member, stranger):
        empty = await outsider.recall_where(topic)
        assert (empty.files, empty.commits, empty.sessions, empty.commands) == ([], [], [], [])
    assert os.path.isabs(where.files[0].place) or where.files[0].place.endswith("cache.md")


async def test_recall_where_refuses_bad_input(connect: ClientFactory) -> None:
    a: RecallClient = await connect()
    from recall_client import InvalidRequest

    with pytest.raises(InvalidRequest, match="query"):
        await a.recall_where("")
    with pytest.raises(InvalidRequest, match="limit"):
        await a.recall_where("x", limit=0)
