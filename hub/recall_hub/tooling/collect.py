"""`recall collect git|docs` and `recall run -- CMD`: the command line of the client-side collectors
(:mod:`recall_client.collect`); they run on the agent's machine and store through the bus as ``--ai``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

AI_ENV = "RECALL_AI_ID"
MAX_NOTES = 20
"""Skipped commits noted one line each; the rest are counted."""


def _add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ai", default=os.environ.get(AI_ENV), help=f"the identity that stores the beads ({AI_ENV})")
    parser.add_argument("--nats", default=os.environ.get("RECALL_NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument("--creds", help="that identity's NATS credentials file (secure stacks)")
    parser.add_argument("--visibility", choices=("private", "group", "global"), default="private")
    parser.add_argument("--group", help="the group of the beads (with --visibility group)")
    parser.add_argument("--session", help="the session the beads belong to")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for one reply, and (at most 10) for NATS to connect")


def add_collect_commands(sub: Any) -> None:
    collect = sub.add_parser("collect", help="store what a git repository or a Markdown tree holds, as beads")
    what = collect.add_subparsers(dest="collector", required=True)
    git = what.add_parser("git", help="commits (message, author, changed paths), each FOLLOWS_FROM its parent")
    git.add_argument("--repo", default=".", help="the repository (default: here)")
    git.add_argument("--since", help="only commits after this revision")
    git.add_argument("--map", action="append", default=[], metavar="EMAIL=AI_ID",
                     help="map a commit author's email to an AI id (repeatable)")
    git.add_argument("--map-file", help="a file of EMAIL=AI_ID lines")
    _add_client_options(git)
    git.set_defaults(run=_collect_git)
    docs = what.add_parser("docs", help="Markdown sections, each PART_OF its document's topic hub")
    docs.add_argument("path", help="a Markdown file, or a folder of them")
    _add_client_options(docs)
    docs.set_defaults(run=_collect_docs)

    shell = what.add_parser("shell", help="a command already run (from a shell hook): line, exit status, output tail")
    shell.add_argument("--command", required=True, help="the command line as it was typed")
    shell.add_argument("--exit-code", type=int, required=True)
    shell.add_argument("--duration", type=float, default=0.0, help="seconds it ran")
    shell.add_argument("--started-at", type=float,
                       help="when it started, epoch seconds (recording the same run again then stores nothing new)")
    shell.add_argument("--output", help="a file holding its output, or - for standard input; its tail is kept")
    _add_client_options(shell)
    shell.set_defaults(run=_collect_shell)

    run = sub.add_parser("run", help="run a command and remember its line, exit status, duration and output tail")
    _add_client_options(run)
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS")
    run.set_defaults(run=_run)


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    scope: dict[str, Any] = {"visibility": args.visibility}
    if args.group:
        scope["group_id"] = args.group
    if args.session:
        scope["session_id"] = args.session
    return scope


def author_map(pairs: list[str], path: str | None) -> dict[str, str]:
    lines = list(pairs)
    if path:
        text = Path(path).expanduser().read_text()
        lines += [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    mapping = {}
    for line in lines:
        email, sep, ai = line.partition("=")
        if not sep or not email.strip() or not ai.strip():
            raise ValueError(f"--map takes EMAIL=AI_ID, not {line!r}")
        mapping[email.strip()] = ai.strip()
    return mapping


def _client(args: argparse.Namespace) -> Any:
    from recall_client import RecallClient
    from recall_client.client import CONNECT_TIMEOUT_S

    if not args.ai:
        raise ValueError(f"name the identity that stores the beads: --ai a_… (or {AI_ENV})")
    # A hub that is away must not hold a wrapped command's shell longer than the caller allows.
    return RecallClient(args.ai, args.nats, creds=args.creds, timeout=args.timeout,
                        connect_timeout=min(CONNECT_TIMEOUT_S, args.timeout))


async def _collect_git(args: argparse.Namespace) -> int:
    """0 when the branch was collected (skipped commits are noted, one line each); 1 when the repository has
    no commits yet or the hub refused the run; 2 for a bad argument or a folder that is not a repository."""
    from recall_client import RecallError
    from recall_client.collect import GitError, collect_git

    try:
        authors = author_map(args.map, args.map_file)
        async with _client(args) as client:
            report = await collect_git(client, args.repo, since=args.since, authors=authors, **_scope(args))
    except (ValueError, OSError, GitError) as exc:
        return _failed("git", exc, 2)
    except RecallError as exc:
        return _failed("git", exc, 1)
    for skipped in report.skipped[:MAX_NOTES]:
        print(f"recall collect git: {skipped}", file=sys.stderr)
    if len(report.skipped) > MAX_NOTES:
        print(f"recall collect git: … and {len(report.skipped) - MAX_NOTES} more commit(s) skipped", file=sys.stderr)
    if not report.commits and args.since is None:
        print(f"recall collect git: {args.repo}: no commits on {report.branch or 'HEAD'} yet, nothing collected",
              file=sys.stderr)
        return 1
    skips = f", {len(report.skipped)} skipped" if report.skipped else ""
    print(f"{report.commits} commit(s): {report.created} bead(s) created, {report.linked} FOLLOWS_FROM link(s)"
          f"{skips}")
    return 0


async def _collect_docs(args: argparse.Namespace) -> int:
    """0 when documents were found (sections the deny-list refuses are noted); 1 when the path holds no
    Markdown document or the hub refused the run; 2 for a path that does not exist or a bad argument."""
    from recall_client import RecallError
    from recall_client.collect import collect_docs

    try:
        async with _client(args) as client:
            report = await collect_docs(client, args.path, **_scope(args))
    except (ValueError, OSError) as exc:
        return _failed("docs", exc, 2)
    except RecallError as exc:
        return _failed("docs", exc, 1)
    for doc, count in report.forgotten.items():
        print(f"recall collect docs: {doc}: {count} section(s) not stored: forgotten (the deny-list refuses them)",
              file=sys.stderr)
    if not report.files:
        print(f"recall collect docs: no Markdown document (.md, .markdown) in {args.path}; hidden files and folders "
              "inside it are left out", file=sys.stderr)
        return 1
    print(f"{report.files} document(s), {report.sections} section(s): {report.created} bead(s) created, "
          f"{report.updated} updated")
    return 0


def _failed(collector: str, exc: Exception, code: int) -> int:
    print(f"recall collect {collector}: {exc}", file=sys.stderr)
    return code


async def _collect_shell(args: argparse.Namespace) -> int:
    from recall_client import RecallError
    from recall_client.collect import CommandRun, record_run, tail_of

    output = b""  # read before the event loop has anything else to do
    try:
        if args.output == "-":
            output = await asyncio.to_thread(sys.stdin.buffer.read)
        elif args.output:
            output = await asyncio.to_thread(lambda: Path(args.output).expanduser().read_bytes())
        run = CommandRun(args.command, args.exit_code, args.duration, tail_of(output), started_at=args.started_at)
        async with _client(args) as client:
            await record_run(client, run, **_scope(args))
    except (ValueError, OSError) as exc:
        return _failed("shell", exc, 2)
    except RecallError as exc:
        return _failed("shell", exc, 1)
    fixed = f"; fixes the failure {run.fixed}" if run.fixed else ""
    print(f"recorded `{run.command}` (exit {run.exit_code}) as {run.bead_id}{fixed}")
    return 0


async def _run(args: argparse.Namespace) -> int:
    """The command's own exit status; recording it is best effort (a hub away is reported, not fatal)."""
    from recall_client import RecallError
    from recall_client.collect.shell import record_run, run_command

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("recall run: give a command after --", file=sys.stderr)
        return 2
    run = await run_command(argv, echo=sys.stdout.buffer)
    try:
        async with _client(args) as client:
            await record_run(client, run, **_scope(args))
    except (RecallError, ValueError, OSError) as exc:
        print(f"recall run: the run was not recorded: {exc}", file=sys.stderr)
    else:
        fixed = f"; fixes the failure {run.fixed}" if run.fixed else ""
        print(f"recall run: recorded as {run.bead_id}{fixed}", file=sys.stderr)
    return run.exit_code
