"""The console's HTML: one layout and small building blocks, as f-strings.

Every value that comes from the hub or the browser goes through :func:`e` (``html.escape`` with quotes);
the functions here return markup that is already safe to join. No bead text is ever inserted unescaped.
Pages carry no inline script or style (the Content-Security-Policy forbids both): colours are classes of
the stylesheet :func:`colours_css` makes, scripts are files under ``/static``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from html import escape
from typing import Any

from recall_schemas import BeadType, MemoryBead, RelType

COLOURS_CSS = "/colours.css"
NAV = (("/groups", "Groups"), ("/search", "Search"), ("/handoffs", "Handoffs"))
CURRENT = ' aria-current="page"'

TYPE_COLOURS: dict[str, str] = {
    BeadType.FACT: "#1f77b4",
    BeadType.DECISION: "#d62728",
    BeadType.OBSERVATION: "#2ca02c",
    BeadType.FINDING: "#9467bd",
    BeadType.TODO: "#ff7f0e",
    BeadType.HANDOFF: "#8c564b",
    BeadType.SUMMARY: "#e377c2",
    BeadType.NOTE: "#7f7f7f",
    BeadType.QUESTION: "#bcbd22",
    BeadType.EVENT: "#17becf",
    BeadType.TOPIC: "#393b79",
}
"""Node colour per bead type (the graph page's legend and its nodes)."""

EDGE_COLOURS: dict[str, str] = {
    RelType.FOLLOWS_FROM: "#555555",
    RelType.RELATED_TO: "#2b8cbe",
    RelType.UPDATES: "#e6550d",
    RelType.PART_OF: "#31a354",
}


def type_class(bead_type: str) -> str:
    return f"bead-type-{e(bead_type)}"


def rel_class(rel_type: str) -> str:
    return f"rel-type-{e(rel_type)}"


def colours_css() -> str:
    """The colour of each bead and relationship type as a custom property of its class (``console.css``
    paints swatches, lines and badges with them)."""
    rules = [f".{type_class(t)} {{ --type-colour: {c}; }}" for t, c in TYPE_COLOURS.items()]
    rules += [f".{rel_class(t)} {{ --rel-colour: {c}; }}" for t, c in EDGE_COLOURS.items()]
    return "\n".join(rules) + "\n"


def e(value: object) -> str:
    """``value`` as text that is safe inside an element or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def when(moment: datetime | None) -> str:
    if moment is None:
        return "—"
    return f'<time datetime="{e(moment.isoformat())}">{e(moment.strftime("%Y-%m-%d %H:%M:%S"))} UTC</time>'


def bead_link(bead_id: str, text: str | None = None) -> str:
    return f'<a href="/beads/{e(bead_id)}">{e(text or bead_id)}</a>'


def notice(text: str) -> str:
    return f'<p class="notice" role="status">{e(text)}</p>' if text else ""


def error_box(text: str) -> str:
    return f'<div class="error" role="alert"><p><strong>Refused:</strong> {e(text)}</p></div>' if text else ""


def csrf_field(token: str) -> str:
    return f'<input type="hidden" name="csrf" value="{e(token)}">'


def field(label: str, name: str, *, value: object = "", kind: str = "text", required: bool = False,
          hint: str = "", ident: str = "", **attrs: object) -> str:
    """A labelled input (its hint tied to it with aria-describedby); ``ident`` when a page has two of ``name``."""
    ident = ident or f"f-{name}"
    extra = "".join(f' {k.replace("_", "-")}="{e(v)}"' for k, v in attrs.items())
    described = f' aria-describedby="{ident}-hint"' if hint else ""
    hint_html = f'<small id="{ident}-hint">{e(hint)}</small>' if hint else ""
    return (
        f'<div class="field"><label for="{ident}">{e(label)}</label>'
        f'<input id="{ident}" name="{e(name)}" type="{e(kind)}" value="{e(value)}"'
        f'{" required" if required else ""}{described}{extra}>{hint_html}</div>'
    )


def select(label: str, name: str, options: Iterable[tuple[str, str]], selected: str = "", ident: str = "") -> str:
    ident = ident or f"f-{name}"
    opts = "".join(
        f'<option value="{e(v)}"{" selected" if v == selected else ""}>{e(text)}</option>' for v, text in options
    )
    return (
        f'<div class="field"><label for="{e(ident)}">{e(label)}</label>'
        f'<select id="{e(ident)}" name="{e(name)}">{opts}</select></div>'
    )


def table(caption: str, headers: Iterable[str], rows: Iterable[Iterable[str]], empty: str = "Nothing yet.") -> str:
    """A table of already-safe cells (escape with :func:`e` when building them)."""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{e(empty)}</p>'
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in headers)
    return f"<table><caption>{e(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def tags(bead: MemoryBead) -> str:
    return " ".join(f'<span class="tag">{e(t)}</span>' for t in bead.tags) or "—"


def type_badge(bead_type: str) -> str:
    return f'<span class="type {type_class(bead_type)}">{e(bead_type)}</span>'


def bead_summary(bead: MemoryBead) -> str:
    return (
        f'{bead_link(bead.bead_id, bead.title)} {type_badge(bead.bead_type.value)} '
        f'<span class="meta">importance {bead.importance} · {e(bead.visibility.value)} · by {e(bead.created_by)} · '
        f"{when(bead.created_at)}</span>"
    )


def layout(title: str, body: str, *, ai_id: str | None, csrf: str = "", current: str = "",
           scripts: Iterable[str] = (), single_identity: bool = False) -> str:
    """A whole page: skip link, header with the navigation and the identity, ``<main>`` with the title."""
    nav = ""
    account = ""
    if ai_id is not None:
        items = "".join(
            f'<li><a href="{href}"{CURRENT if href == current else ""}>{e(text)}</a></li>' for href, text in NAV
        )
        nav = f'<nav aria-label="Main"><ul>{items}</ul></nav>'
        sign_out = "" if single_identity else (
            f'<form method="post" action="/logout" class="inline">{csrf_field(csrf)}'
            '<button type="submit">Sign out</button></form>'
        )
        account = f'<p class="who">Acting as <strong>{e(ai_id)}</strong> {sign_out}</p>'
    script_tags = "".join(f'<script src="{e(src)}" defer></script>' for src in scripts)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · Recall console</title>"
        f'<link rel="stylesheet" href="/static/console.css"><link rel="stylesheet" href="{COLOURS_CSS}">'
        f"{script_tags}</head><body>"
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header><p class="brand"><a href="/groups">Recall console</a></p>{nav}{account}</header>'
        f'<main id="main" tabindex="-1"><h1>{e(title)}</h1>{body}</main></body></html>'
    )


def data_attrs(**values: Any) -> str:
    return "".join(f' data-{k.replace("_", "-")}="{e(v)}"' for k, v in values.items())
