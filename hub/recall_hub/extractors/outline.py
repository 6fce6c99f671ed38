"""Deterministic extraction from a text's own structure, used when no LLM is configured (or its answer
was unusable).

Headings (Markdown ``#`` lines, or a line underlined with ``===``/``---``) name topics; under each, every
list item and every sentence of a paragraph is a fact, and a fenced code block is one fact. Text
before the first heading, or a text without any, is split into paragraphs, each filed under its most
salient words (see :func:`keywords`); paragraphs filed under the same words share one topic.
The same text always gives the same topics and facts, in text order.
"""

from __future__ import annotations

import re
from collections import Counter

from recall_hub.extractors.base import ExtractedTopic, topic_key

_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-']*[A-Za-z0-9]|[A-Za-z]")
MIN_FACT_CHARS = 3

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had has
    have having he her here hers herself him himself his how i if in into is it its itself just me more
    most my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves one two may might must shall us get got use used using new
    like make made many much every via per yet still well even""".split()
)


def keywords(text: str, n: int = 2) -> list[str]:
    """The ``n`` most salient words of ``text``: most frequent first (words of 3+ letters, not stopwords),
    ties to the capitalised (names) and then to the first to occur; returned in text order."""
    words = _WORD.findall(text)
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    shown: dict[str, str] = {}
    capital: Counter[str] = Counter()
    for position, word in enumerate(words):
        key = word.casefold()
        if len(key) < 3 or key in STOPWORDS:
            continue
        counts[key] += 1
        first.setdefault(key, position)
        shown.setdefault(key, word)
        capital[key] += word[0].isupper()
    best = sorted(counts, key=lambda k: (-counts[k], -capital[k], first[k]))[:n]
    return [shown[k] for k in sorted(best, key=first.__getitem__)]


def sentences(paragraph: str) -> list[str]:
    text = " ".join(paragraph.split())
    return [s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) >= MIN_FACT_CHARS]


def _blocks(text: str) -> list[tuple[str | None, list[str]]]:
    """``(heading or None, facts)`` in text order: one block per heading, and one per paragraph before
    the first heading."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[tuple[str | None, list[str]]] = []
    heading: str | None = None
    facts: list[str] = []
    paragraph: list[str] = []
    fence: list[str] | None = None

    def flush_paragraph() -> None:
        nonlocal paragraph
        if paragraph:
            facts.extend(sentences(" ".join(paragraph)))
            paragraph = []
            if heading is None:
                close_block(None)

    def close_block(next_heading: str | None) -> None:
        nonlocal facts, heading
        if facts:
            blocks.append((heading, facts))
        facts = []
        heading = next_heading

    i = 0
    while i < len(lines):
        line = lines[i]
        if fence is not None:
            if _FENCE.match(line):
                code = "\n".join(fence).strip()
                if len(code) >= MIN_FACT_CHARS:
                    facts.append(code)
                fence = None
            else:
                fence.append(line)
            i += 1
            continue
        if _FENCE.match(line):
            flush_paragraph()
            fence = []
            i += 1
            continue
        atx = _ATX.match(line)
        underline = i + 1 < len(lines) and line.strip() and not paragraph and _SETEXT.match(lines[i + 1])
        if atx or underline:
            flush_paragraph()
            close_block((atx.group(2) if atx else line).strip()[:200])
            i += 1 if atx else 2
            continue
        item = _ITEM.match(line)
        if item:
            flush_paragraph()
            paragraph = [item.group(1)]
            # An item's continuation lines are indented; anything else ends it.
            while i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")) and lines[i + 1].strip() \
                    and not _ITEM.match(lines[i + 1]):
                i += 1
                paragraph.append(lines[i].strip())
            text_of_item = " ".join(" ".join(paragraph).split())
            if len(text_of_item) >= MIN_FACT_CHARS:
                facts.append(text_of_item)
            paragraph = []
            if heading is None:
                close_block(None)
        elif not line.strip():
            flush_paragraph()
        else:
            paragraph.append(line.strip())
        i += 1
    if fence:
        facts.append("\n".join(fence).strip())
    flush_paragraph()
    close_block(None)
    return blocks


def outline(text: str, max_facts: int) -> list[ExtractedTopic]:
    """Topics and facts of ``text`` by its structure, at most ``max_facts`` facts (the first ones)."""
    topics: dict[str, ExtractedTopic] = {}
    left = max_facts
    for heading, facts in _blocks(text):
        if left <= 0:
            break
        name = heading if heading and topic_key(heading) else " ".join(keywords(" ".join(facts))) or "notes"
        topic = topics.setdefault(topic_key(name), ExtractedTopic(name))
        seen = set(topic.facts)
        for fact in facts:
            if left <= 0:
                break
            if fact not in seen:
                topic.facts.append(fact)
                seen.add(fact)
                left -= 1
    return [topic for topic in topics.values() if topic.facts]


class OutlineExtractor:
    name = "outline"

    async def extract(self, text: str, max_facts: int) -> list[ExtractedTopic]:
        return outline(text, max_facts)

    async def aclose(self) -> None:
        return None
