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
from recall_client.collect.docs import document_name
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


async def run(*command: str, cwd: Path | None = None) -> Ran:
    """A process run without blocking the event loop (the hub under test serves on it)."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())


async def recall(stack: EmbeddedStack, ai: str, *args: str, cwd: Path | None = None) -> Ran:
    """``recall <command> [<subcommand>] --ai <ai> --nats <the stack's> <args>`` (run in ``cwd``)."""
    words = 1 if args[0] == "run" else 2  # `recall run …`, `recall collect git …`
    return await run(str(RECALL), *args[:words], "--ai", ai, "--nats", stack.nats_url, *args[words:], cwd=cwd)


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return path


def notes_about(ran: Ran, sha: str) -> list[str]:
    """The lines of the run's errors that name the commit; a traceback is never one of them."""
    assert "Traceback" not in ran.stderr, ran.stderr
    return [line for line in ran.stderr.splitlines() if sha[:12] in line]


async def follows(client: RecallClient, bead_id: str) -> list[str]:
    return [e.to_id for e in await client.get_relationships(bead_id, rel_type="FOLLOWS_FROM", direction="out")]


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
    assert ran.returncode == 2 and "not a git repository" in ran.stderr.lower()
    assert "Traceback" not in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    repo = new_repo(tmp_path / "repo")
    commit(repo, "a.txt", "1", "First")
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(repo), "--since", "no-such-rev")
    assert ran.returncode == 2 and "no-such-rev" in ran.stderr and "Traceback" not in ran.stderr
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(tmp_path), "--map", "nobody")
    assert ran.returncode == 2 and "EMAIL=AI_ID" in ran.stderr


async def test_a_forgotten_commit_is_skipped_with_a_note_and_the_chain_steps_over_it(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    a = await connect()
    repo = new_repo(tmp_path / "repo")
    shas = [
        commit(repo, "ledger.py", "1", "Create the ledger module"),
        commit(repo, "export.py", "2", "Add invoice export"),
        commit(repo, "importer.py", "3", "Drop the legacy importer"),
    ]
    assert (await recall(stack, a.ai_id, "collect", "git", "--repo", str(repo))).returncode == 0
    beads = {b.metadata["commit"]: b.bead_id for b in await a.get_by_tag("git")}
    await a.forget_bead(beads[shas[2]], "it held a customer's name")
    shas.append(commit(repo, "keys.py", "4", "Rotate the signing keys"))

    for rerun in range(2):  # the second run stores nothing, links nothing new, and notes the same skip
        ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(repo))
        assert ran.returncode == 0, ran.stderr
        [note] = notes_about(ran, shas[2])
        assert "forgotten" in note and "Drop the legacy importer" in note
        assert f"4 commit(s): {1 - rerun} bead(s) created, 2 FOLLOWS_FROM link(s), 1 skipped" in ran.stdout
    newest = {b.metadata["commit"]: b.bead_id for b in await a.get_by_tag("git")}
    assert set(newest) == {shas[0], shas[1], shas[3]}
    assert await follows(a, newest[shas[3]]) == [beads[shas[1]]]  # the nearest earlier commit still there

    # With --since the forgotten commit is the one the chain would join: the walk goes on to its parent.
    since = await recall(stack, a.ai_id, "collect", "git", "--repo", str(repo), "--since", shas[2])
    assert since.returncode == 0, since.stderr
    assert len(notes_about(since, shas[2])) == 1
    assert "1 commit(s): 0 bead(s) created, 1 FOLLOWS_FROM link(s), 1 skipped" in since.stdout
    assert await follows(a, newest[shas[3]]) == [beads[shas[1]]]
    report = await collect_git(a, repo)
    assert [(s.sha, s.reason.split()[0]) for s in report.skipped] == [(shas[2], "forgotten")]
    assert report.bead_ids == newest and report.created == 0


async def test_a_commit_no_longer_visible_is_skipped_and_a_deleted_one_stored_again(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    ops = await connect("o_" + secrets.token_hex(6))
    a = await connect()
    group = await ops.create_group("collectors")
    await ops.add_member(group.group_id, a.ai_id)
    repo = new_repo(tmp_path / "repo")
    shas = [commit(repo, f"f{i}.py", str(i), f"Step {i} of the {word()} migration") for i in range(3)]
    first = await collect_git(a, repo)
    # shas[1] moves into the group and a leaves it: the bead exists, but a no longer sees it.
    await a.update_bead(first.bead_ids[shas[1]], visibility="group", group_id=group.group_id)
    await ops.remove_member(group.group_id, a.ai_id)
    await a.delete_bead(first.bead_ids[shas[2]])
    shas.append(commit(repo, "f3.py", "3", "Step 3: switch the reads over"))

    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(repo))
    assert ran.returncode == 0, ran.stderr
    [note] = notes_about(ran, shas[1])
    assert "no longer visible" in note
    assert notes_about(ran, shas[2]) == []  # deleted, not forgotten: stored again
    assert "4 commit(s): 2 bead(s) created, 2 FOLLOWS_FROM link(s), 1 skipped" in ran.stdout
    again = await collect_git(a, repo)
    assert again.created == 0 and [s.sha for s in again.skipped] == [shas[1]]
    restored = again.bead_ids[shas[2]]
    assert restored != first.bead_ids[shas[2]]
    assert await follows(a, restored) == [first.bead_ids[shas[0]]]  # stepping over the one it cannot see
    assert await follows(a, again.bead_ids[shas[3]]) == [restored]

    # Collecting into a group a is not in is an error of the run: one clear line, nothing stored.
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(repo), "--visibility", "group",
                       "--group", group.group_id)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert f"group {group.group_id} not found" in ran.stderr


async def test_git_repos_under_hidden_folders_relative_paths_and_odd_file_names(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    a = await connect()
    repo = new_repo(tmp_path / ".local" / "src" / "tool")
    sha = commit(repo, "docs/café menu.md", "x", "Add the café menu")
    second = commit(repo, 'odd\t"name".txt', "y", "Add an oddly named file")
    work = tmp_path / "work"
    work.mkdir()
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", "../.local/src/tool/docs", cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert "2 commit(s): 2 bead(s) created, 1 FOLLOWS_FROM link(s)" in ran.stdout
    beads = {b.metadata["commit"]: b for b in await a.get_by_tag("git")}
    assert beads[sha].metadata["paths"] == ["docs/café menu.md"] and beads[sha].metadata["repo"] == "tool"
    assert "- docs/café menu.md" in beads[sha].content
    assert beads[second].metadata["paths"] == ['odd\t"name".txt']
    here = await recall(stack, a.ai_id, "collect", "git", "--repo", ".", cwd=repo / "docs")
    assert here.returncode == 0 and "2 commit(s): 0 bead(s) created" in here.stdout, here.stderr

    # A repository without commits, and a folder that is not there: one clear line each, not a success.
    empty = new_repo(tmp_path / "empty")
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", str(empty))
    assert ran.returncode == 1 and "no commits on main yet" in ran.stderr and "Traceback" not in ran.stderr
    ran = await recall(stack, a.ai_id, "collect", "git", "--repo", "../gone", cwd=work)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr and "gone" in ran.stderr


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
    assert "within 1.0s" in ran.stderr  # the hub away holds the shell no longer than --timeout


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


def test_document_names_are_relative_to_the_working_directory_only_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert document_name(Path("..draft.md")) == "..draft.md"  # a name starting with dots, here
    assert document_name(Path("sub/../guide.md")) == "guide.md"
    assert document_name(Path("../guide.md")) == str(tmp_path / "guide.md")


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


async def test_docs_under_a_hidden_folder_or_given_relative_are_collected(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    """Only names inside the tree count as hidden; the folder given may lie anywhere, and be relative."""
    a = await connect()
    kb = tmp_path / ".config" / "kb"
    (kb / ".drafts").mkdir(parents=True)
    (kb / "deploy.md").write_text(f"# Deploy\nThe {word()} release train leaves on Tuesdays.\n")
    (kb / ".drafts" / "wip.md").write_text("# Draft\nnot yet\n")
    (kb / ".hidden.md").write_text("# Hidden\nnot this either\n")
    work = tmp_path / "work"
    (work / "docs").mkdir(parents=True)
    (work / "docs" / "api.md").write_text("# Endpoints\nGET /v1/orders\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "oncall.md").write_text("# Pager\nEscalate after 15 minutes.\n")

    hidden = await recall(stack, a.ai_id, "collect", "docs", str(kb), cwd=work)
    assert hidden.returncode == 0, hidden.stderr
    assert "1 document(s), 1 section(s): 2 bead(s) created" in hidden.stdout  # the hub and the section
    for path in ("docs", "./docs"):
        ran = await recall(stack, a.ai_id, "collect", "docs", path, cwd=work)
        assert ran.returncode == 0 and "1 document(s), 1 section(s)" in ran.stdout, ran.stderr
    up = await recall(stack, a.ai_id, "collect", "docs", "../notes", cwd=work)
    assert up.returncode == 0 and "1 document(s), 1 section(s): 2 bead(s) created" in up.stdout, up.stderr
    files = {b.metadata["file"] for b in await a.get_recent(limit=20) if b.metadata.get("collector") == "docs"}
    assert files == {str(kb / "deploy.md"), "docs/api.md", str(tmp_path / "notes" / "oncall.md")}

    # Nothing to collect is said, and is not a success; a path that is not there is a usage error.
    (tmp_path / "empty" / ".git").mkdir(parents=True)
    (tmp_path / "empty" / ".git" / "README.md").write_text("# inside a hidden folder\n")
    empty = await recall(stack, a.ai_id, "collect", "docs", "../empty", cwd=work)
    assert empty.returncode == 1 and "no Markdown document" in empty.stderr and "Traceback" not in empty.stderr
    missing = await recall(stack, a.ai_id, "collect", "docs", "../nowhere", cwd=work)
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr


async def test_a_forgotten_section_is_noted_and_the_rest_collected(
    connect: ClientFactory, stack: EmbeddedStack, tmp_path: Path
) -> None:
    a = await connect()
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "secret.md").write_text(f"# Vault\nThe {word()} vault token lives in the safe.\n")
    (tmp_path / "kb" / "team.md").write_text("# Team\nStand-up at ten.\n")
    first = await collect_docs(a, tmp_path / "kb")
    secret = str(tmp_path / "kb" / "secret.md")
    [vault] = [b for b in await a.get_recent(limit=10) if b.title == "Vault"]
    await a.forget_bead(vault.bead_id, "a credential")
    (tmp_path / "kb" / "team.md").write_text("# Team\nStand-up at half past nine.\n")

    ran = await recall(stack, a.ai_id, "collect", "docs", str(tmp_path / "kb"))
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    [note] = [line for line in ran.stderr.splitlines() if secret in line]
    assert "1 section(s) not stored: forgotten" in note
    assert "2 document(s), 2 section(s): 0 bead(s) created, 1 updated" in ran.stdout
    again = await collect_docs(a, tmp_path / "kb")
    assert (again.created, again.updated, again.forgotten) == (0, 0, {secret: 1})
    assert again.hubs == {k: v for k, v in first.hubs.items() if k != secret}


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
