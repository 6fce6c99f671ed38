"""Markdown documents as beads: one per section (split at headings), each ``PART_OF`` its document's topic
hub (the hub is named by the file's path). A section is keyed by path, heading trail and occurrence, so
collecting again updates the sections whose text changed and leaves the others as they are; a section
removed from the document stays in memory."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recall_schemas.capture import TopicInput
from recall_schemas.requests import MAX_BATCH

from ..client import RecallClient

SUFFIXES = (".md", ".markdown")
MAX_SECTION_CHARS = 200_000
REQUEST_BYTES = 256 * 1024
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Section:
    trail: str
    """The headings down to this section, ``"Install > Linux"``; the file's name for text before any heading."""
    text: str
    occurrence: int = 0
    """How many earlier sections of the file have the same trail."""


@dataclass
class DocsReport:
    files: int = 0
    sections: int = 0
    created: int = 0
    updated: int = 0
    hubs: dict[str, str] = field(default_factory=dict)
    """Hub bead id by document path."""
    forgotten: dict[str, int] = field(default_factory=dict)
    """By document path, how many of its sections were not stored because their content was forgotten
    (the deny-list refuses it; a section whose text changed since is stored again)."""


def markdown_sections(text: str, name: str) -> list[Section]:
    """The sections of a Markdown text, split at ATX headings (not inside fenced code); empty ones left out."""
    sections: list[Section] = []
    trail: list[tuple[int, str]] = []
    body: list[str] = []
    seen: dict[str, int] = {}
    in_fence = False

    def close() -> None:
        content = "\n".join(body).strip()
        title = " > ".join(h for _, h in trail) or name
        if content or trail:
            sections.append(Section(title, content, seen.get(title, 0)))
            seen[title] = seen.get(title, 0) + 1
        body.clear()

    for line in text.replace("\r\n", "\n").split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _HEADING.match(line)
        if heading is None:
            body.append(line)
            continue
        close()
        level = len(heading.group(1))
        trail[:] = [(lvl, h) for lvl, h in trail if lvl < level] + [(level, heading.group(2).strip() or "(untitled)")]
    close()
    return [s for s in sections if s.text or s.trail != name]


def markdown_files(path: Path) -> list[Path]:
    """``path`` itself when it is a file, else the Markdown files under it, sorted. Hidden names count only
    inside the tree: a folder starting with ``.`` under ``path`` is not entered and such a file is left out,
    while ``path`` may itself lie in (or be) a hidden folder, like ``~/.config/kb``."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or folder: {path}")
    found = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(folder, f) for f in files if not f.startswith(".") and Path(f).suffix.lower() in SUFFIXES]
    return sorted(f for f in found if f.is_file())


def document_name(path: Path) -> str:
    """The path as collected: relative to the working directory when under it, else absolute."""
    absolute, here = path.resolve(), Path.cwd().resolve()
    return str(absolute.relative_to(here)) if absolute.is_relative_to(here) else str(absolute)


def _read(path: Path) -> list[tuple[str, list[Section]]]:
    return [
        (document_name(file), markdown_sections(file.read_text(errors="replace"), file.name))
        for file in markdown_files(path.expanduser())
    ]


def _fact(doc: str, section: Section) -> dict[str, Any]:
    key = hashlib.sha256(f"{doc}\0{section.trail}\0{section.occurrence}".encode()).hexdigest()[:40]
    return {
        "title": section.trail[:512],
        "content": section.text[:MAX_SECTION_CHARS],
        "key": f"doc:{key}",
        "metadata": {"collector": "docs", "file": doc, "source": doc, "heading": section.trail},
    }


def _batches(facts: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    size = 0
    for fact in facts:
        cost = len(fact["content"]) + len(fact["title"]) + 512
        if batch and (len(batch) >= MAX_BATCH or size + cost > REQUEST_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(fact)
        size += cost
    if batch:
        yield batch


async def collect_docs(client: RecallClient, path: str | Path, **scope: Any) -> DocsReport:
    """Store the sections of the Markdown file ``path`` (or of every ``.md``/``.markdown`` file under it,
    see :func:`markdown_files`) under one topic hub per document. ``path`` is relative to the working
    directory, ``~`` expanded; one that does not exist is :class:`FileNotFoundError`. ``scope``:
    visibility, group_id, session_id (default private)."""
    report = DocsReport()
    for doc, sections in await asyncio.to_thread(_read, Path(path)):
        report.files += 1
        report.sections += len(sections)
        for batch in _batches([_fact(doc, s) for s in sections]):
            result = await client.remember_topics(
                [TopicInput.model_validate({"name": doc[-200:], "facts": batch})], bead_type="note",
                hub_metadata={"collector": "docs", "file": doc}, **scope,
            )
            report.created += result.created
            report.updated += result.updated
            if result.forgotten:
                report.forgotten[doc] = report.forgotten.get(doc, 0) + result.forgotten
            if result.topics:  # none when every section of the batch was refused
                report.hubs[doc] = result.topics[0].hub.bead_id
    return report
