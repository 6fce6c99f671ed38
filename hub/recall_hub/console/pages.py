"""The console's HTML pages. Each reads the hub as the browser's identity, so it shows exactly what that
identity may see; hub refusals become readable messages (``app.py`` maps them to pages and statuses).

Why this module is long (~720 lines): one handler per page of the console (groups, graph, search, bead,
handoffs, feed, audit), each a few hub calls and its HTML from ``html.py``; they share the session and
error handling defined here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlencode

from recall_client import RecallClient
from recall_schemas import (
    BeadType,
    Forbidden,
    Group,
    MemoryBead,
    NotFound,
    RecallError,
    Relationship,
    SearchMode,
)
from recall_schemas.coordination import Handoff
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .graph import DEFAULT_EDGE_READS, DEFAULT_NODES, MAX_EDGE_READS, MAX_NODES, GraphFilters
from .html import (
    EDGE_COLOURS,
    TYPE_COLOURS,
    bead_link,
    bead_summary,
    csrf_field,
    data_attrs,
    e,
    error_box,
    field,
    layout,
    notice,
    rel_class,
    select,
    table,
    tags,
    type_badge,
    type_class,
    when,
)
from .pool import CannotConnect
from .sessions import LOGIN_COOKIE, LOGIN_FORM_MAX_AGE_S, SESSION_COOKIE, SESSION_MAX_AGE_S, BrowserSession
from .state import (
    BEAD_ID,
    GROUP_ID,
    SESSION_ID,
    BadInput,
    checked_form,
    client_of,
    console_of,
    hold_client,
    int_param,
    posted_fields,
    refuse_cross_site,
    session_of,
    status_of,
    valid_id,
)

log = logging.getLogger(__name__)

NOTICES = {
    "added": "Member added.",
    "removed": "Member removed.",
    "handed": "The ops role was handed over; the new ops receives the brief.",
    "created": "Group created; you are its ops.",
    "acknowledged": "Handoff acknowledged.",
    "verified": "You verified this bead.",
    "rejected": "You rejected this bead.",
}
"""The confirmations a redirect may ask for (by key: no text travels in the address)."""


def page(request: Request, session: BrowserSession | None, title: str, body: str, *, current: str = "",
         status: int = 200, scripts: Iterable[str] = ()) -> HTMLResponse:
    single = console_of(request).identities.single is not None
    html = layout(
        title, body, ai_id=session.ai_id if session else None, csrf=session.csrf if session else "",
        current=current, scripts=scripts, single_identity=single,
    )
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def confirmation(request: Request) -> str:
    return notice(NOTICES.get(request.query_params.get("done", ""), ""))


def _safe_next(target: str | None) -> str:
    return target if target and target.startswith("/") and not target.startswith("//") else "/groups"


# --- login ---------------------------------------------------------------------------------------

SIGN_IN_EXPIRED = "This sign-in form has expired or did not come from this console; try again."


async def login(request: Request) -> Response:
    console = console_of(request)
    target = _safe_next(request.query_params.get("next") or request.query_params.get("next_page"))
    single = console.identities.single
    if single is not None:  # started with one credentials file: that identity, no questions
        try:
            return await _sign_in(request, single, target)
        except CannotConnect as exc:
            return page(request, None, "Cannot sign in", error_box(exc.message), status=exc.status)
    problem = ""
    status = 200
    ai_id = ""
    if request.method == "POST":
        fields = await posted_fields(request)
        ai_id = fields.get("ai_id", "")
        target = _safe_next(fields.get("next"))
        try:
            refuse_cross_site(request)
            if not console.sign_in_forms.valid(request.cookies.get(LOGIN_COOKIE), fields.get("csrf", "")):
                raise BadInput(SIGN_IN_EXPIRED, 403)
            unknown = console.identities.problem(ai_id)
            if unknown is not None:
                raise BadInput(unknown)
            return await _sign_in(request, ai_id, target)
        except (BadInput, CannotConnect) as exc:
            problem, status = exc.message, exc.status
    if console.identities.listed:
        choices = select("Identity", "ai_id", [(i, i) for i in console.identities.listed], ai_id)
        how = "<p>Choose the identity whose credentials this console holds.</p>"
    else:
        choices = field(
            "AI id", "ai_id", value=ai_id, required=True, autocomplete="off",
            hint="o_… (an ops) or a_… (an agent); NATS runs without authentication, so any id may be used.",
        )
        how = "<p>Development mode: the console acts as the AI id you type.</p>"
    nonce = console.sign_in_forms.nonce(request.cookies.get(LOGIN_COOKIE))
    body = (
        f"{how}{error_box(problem)}"
        f'<form method="post" action="/login">{csrf_field(console.sign_in_forms.token(nonce))}{choices}'
        f'<input type="hidden" name="next" value="{e(target)}"><button type="submit">Sign in</button></form>'
    )
    response = page(request, None, "Sign in", body, status=status)
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=LOGIN_FORM_MAX_AGE_S, path="/login", **_cookie_flags(request))
    return response


def _cookie_flags(request: Request) -> dict[str, Any]:
    return {"httponly": True, "samesite": "strict", "secure": request.url.scheme == "https"}


async def _sign_in(request: Request, ai_id: str, target: str) -> Response:
    """A new session as ``ai_id`` (connected first: a refusal is said on the sign-in page, not later)."""
    await hold_client(request, ai_id)
    sessions = console_of(request).sessions
    sessions.end(request.cookies.get(SESSION_COOKIE))  # whatever this browser was signed in as ends
    cookie, _ = sessions.start(ai_id)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(SESSION_COOKIE, cookie, max_age=SESSION_MAX_AGE_S, **_cookie_flags(request))
    response.delete_cookie(LOGIN_COOKIE, path="/login", **_cookie_flags(request))
    return response


async def logout(request: Request) -> Response:
    session = session_of(request)
    await checked_form(request, session)
    console_of(request).sessions.end(request.cookies.get(SESSION_COOKIE))  # every copy of the cookie
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, **_cookie_flags(request))
    return response


async def home(request: Request) -> Response:
    session_of(request)
    return RedirectResponse("/groups", status_code=303)


# --- groups ----------------------------------------------------------------------------------------


def _role(group: Group, ai_id: str) -> str | None:
    return next((m.role.value for m in group.members if m.ai_id == ai_id), None)


def _group_section(group: Group, session: BrowserSession) -> str:
    gid = group.group_id
    role = _role(group, session.ai_id)
    rows = [
        (e(m.ai_id) + (" (you)" if m.ai_id == session.ai_id else ""), e(m.role.value), when(m.joined_at))
        for m in group.members
    ]
    links = (
        f'<a href="/groups/{e(gid)}/graph">Memory graph</a> · <a href="/feed/{e(gid)}">Live feed</a> · '
        f'<a href="/handoffs?group={e(gid)}">Handoffs</a>'
        + (f' · <a href="/groups/{e(gid)}/audit">Audit trail</a>' if role == "ops" else "")
    )
    forms = ""
    if role == "ops":
        others = [(m.ai_id, m.ai_id) for m in group.members if m.ai_id != session.ai_id]
        token = csrf_field(session.csrf)
        forms = (
            f"<h3>Manage {e(group.name)}</h3>"
            f'<form method="post" action="/groups/{e(gid)}/members" class="row">{token}'
            + field("Add member (AI id)", "ai_id", required=True, ident=f"add-{gid}", autocomplete="off")
            + select("Role", "role", [("agent", "agent"), ("ops", "ops")], "agent", ident=f"role-{e(gid)}")
            + '<button type="submit">Add member</button></form>'
        )
        if others:
            forms += (
                f'<form method="post" action="/groups/{e(gid)}/members/remove" class="row">{token}'
                + select("Remove member", "ai_id", others, ident=f"remove-{e(gid)}")
                + '<button type="submit" class="secondary">Remove member</button></form>'
                f'<form method="post" action="/groups/{e(gid)}/handoff">{token}<div class="row">'
                + select("Hand the ops role to", "to_agent", others, ident=f"to-{e(gid)}")
                + "</div>"
                f'<div class="field"><label for="brief-{e(gid)}">Brief for the new ops</label>'
                f'<textarea id="brief-{e(gid)}" name="brief" required maxlength="65536"></textarea></div>'
                '<button type="submit">Hand off ops</button></form>'
            )
    return (
        f'<section class="card" aria-labelledby="h-{e(gid)}"><h2 id="h-{e(gid)}">{e(group.name)}</h2>'
        f'<p class="meta">{e(gid)} · your role: {e(role or "—")}</p><p>{links}</p>'
        + table(f"Members of {group.name}", ("Member", "Role", "Joined"), rows)
        + forms + "</section>"
    )


async def groups_page(request: Request, *, error: str = "", status: int = 200) -> Response:
    session, client = await client_of(request)
    groups = await client.list_groups()
    sections = "".join(_group_section(g, session) for g in groups) or (
        '<p class="empty">You are in no group yet.</p>'
    )
    create = (
        f'<section class="card" aria-labelledby="h-new"><h2 id="h-new">New group</h2>'
        f'<form method="post" action="/groups" class="row">{csrf_field(session.csrf)}'
        + field("Group name", "name", required=True, maxlength=200)
        + '<button type="submit">Create group</button></form></section>'
    )
    body = confirmation(request) + error_box(error) + sections + create
    return page(request, session, "Your groups", body, current="/groups", status=status)


async def groups_get(request: Request) -> Response:
    return await groups_page(request)


async def _group_action(request: Request, action: str) -> Response:
    session, client = await client_of(request)
    fields = await checked_form(request, session)
    gid = request.path_params.get("group_id", "")
    try:
        if action == "create":
            await client.create_group(fields.get("name", ""))
            done = "created"
        else:
            gid = valid_id(GROUP_ID, gid, "group")
            if action == "add":
                await client.add_member(gid, fields.get("ai_id", ""), fields.get("role", "agent") or "agent")
                done = "added"
            elif action == "remove":
                await client.remove_member(gid, fields.get("ai_id", ""))
                done = "removed"
            else:
                brief = fields.get("brief", "")
                if not brief:
                    raise BadInput("Write a short brief for the new ops.")
                await client.transfer_ops(gid, fields.get("to_agent", ""), brief)
                done = "handed"
    except RecallError as exc:
        return await groups_page(request, error=exc.message, status=status_of(exc))
    except BadInput as exc:
        return await groups_page(request, error=exc.message, status=exc.status)
    return RedirectResponse(f"/groups?done={done}", status_code=303)


async def group_create(request: Request) -> Response:
    return await _group_action(request, "create")


async def member_add(request: Request) -> Response:
    return await _group_action(request, "add")


async def member_remove(request: Request) -> Response:
    return await _group_action(request, "remove")


async def ops_handoff(request: Request) -> Response:
    return await _group_action(request, "handoff")


# --- graph -----------------------------------------------------------------------------------------


async def graph_page(request: Request) -> Response:
    session, client = await client_of(request)
    gid = valid_id(GROUP_ID, request.path_params["group_id"], "group")
    group = await client.list_members(gid)  # a non-member: NotFound, the 404 page
    params = request.query_params
    problem = ""
    status = 200
    try:
        GraphFilters.parse(params)
    except BadInput as exc:
        problem, status = exc.message, 400
    types = [("", "any type")] + [(t.value, t.value) for t in BeadType]
    filters = (
        f'<form method="get" action="/groups/{e(gid)}/graph" aria-label="Filter the graph"><div class="row">'
        + field("Tag", "tag", value=params.get("tag", ""))
        + select("Type", "type", types, params.get("type", ""))
        + field("Session", "session", value=params.get("session", ""), placeholder="s_…")
        + field("From", "since", value=params.get("since", ""), kind="date")
        + field("Until", "until", value=params.get("until", ""), kind="date")
        + field("Beads (max)", "limit", value=params.get("limit", DEFAULT_NODES), kind="number", min=1,
                max=MAX_NODES)
        + field("Edges for the first", "edges", value=params.get("edges", DEFAULT_EDGE_READS),
                kind="number", min=0, max=MAX_EDGE_READS, hint="beads shown")
        + '<button type="submit">Apply filters</button></div></form>'
    )
    legend = (
        '<ul class="legend" aria-label="Bead types">'
        + "".join(
            f'<li><span class="swatch {type_class(t)}"></span>{e(t)}</li>' for t in TYPE_COLOURS
        )
        + "</ul><ul class=\"legend\" aria-label=\"Relationship types\">"
        + "".join(f'<li><span class="line {rel_class(t)}"></span>{e(t)}</li>' for t in EDGE_COLOURS)
        + "</ul>"
    )
    api = f"/api/groups/{quote(gid)}/graph"
    if params:
        api += "?" + urlencode(list(params.multi_items()))
    body = (
        error_box(problem) + filters + legend
        + f'<p id="graph-status" role="status" aria-live="polite">Loading the graph…</p>'
        f'<div class="graph-layout"><div id="graph" role="img" aria-label="Graph of the group\'s beads; '
        f'the list below offers the same beads by keyboard"{data_attrs(api=api)}></div>'
        '<aside id="bead-panel" aria-labelledby="panel-title" aria-live="polite"><h2 id="panel-title">Bead</h2>'
        '<p id="panel-body" class="hint">Select a bead in the graph or the list.</p></aside></div>'
        '<h2 id="list-title">Beads shown</h2><ul id="node-list" aria-labelledby="list-title"></ul>'
        '<noscript><p>The graph needs JavaScript; <a href="/search">search</a> and the bead pages do not.'
        "</p></noscript>"
    )
    return page(request, session, f"Memory graph: {group.name}", body, status=status,
                scripts=("/static/cytoscape.min.js", "/static/graph.js"))


# --- search ----------------------------------------------------------------------------------------


def _explanation(hit_score: float, sources: str, relevance: float, prior: float, notes: list[str]) -> str:
    note_html = "".join(f"<li>{e(n)}</li>" for n in notes)
    return (
        f'<dl class="facts"><dt>Score</dt><dd>{hit_score:.4f}</dd><dt>Sources</dt><dd>{sources or "—"}</dd>'
        f"<dt>Relevance</dt><dd>{relevance:.4f}</dd><dt>Prior</dt><dd>{prior:.4f}</dd>"
        f"<dt>Notes</dt><dd>{'<ul>' + note_html + '</ul>' if note_html else '—'}</dd></dl>"
    )


def _subgraph_list(seeds: list[str], beads: dict[str, MemoryBead], edges: list[Relationship],
                   depth: dict[str, int]) -> str:
    """``why``'s subgraph as nested lists: each seed, then the beads it reaches by their typed edges."""
    if not beads:
        return '<p class="empty">No seed found.</p>'
    by_from: dict[str, list[Relationship]] = {}
    for edge in edges:
        by_from.setdefault(edge.from_id, []).append(edge)
        by_from.setdefault(edge.to_id, []).append(edge)
    shown: set[str] = set()

    def item(bead_id: str, level: int) -> str:
        bead = beads.get(bead_id)
        if bead is None or bead_id in shown:
            return ""
        shown.add(bead_id)
        children = ""
        if level < 3:
            parts = []
            for edge in by_from.get(bead_id, []):
                other = edge.to_id if edge.from_id == bead_id else edge.from_id
                arrow = "→" if edge.from_id == bead_id else "←"
                inner = item(other, level + 1)
                if inner:
                    parts.append(f'<li><span class="meta">{arrow} {e(edge.rel_type.value)}</span><ul>{inner}</ul></li>')
            children = f"<ul>{''.join(parts)}</ul>" if parts else ""
        return f"<li>{bead_summary(bead)} <span class=\"meta\">(depth {depth.get(bead_id, 0)})</span>{children}</li>"

    roots = "".join(item(s, 0) for s in seeds)
    rest = "".join(item(b, 1) for b in beads if b not in shown)
    return f'<ul class="subgraph">{roots}{rest}</ul>'


async def search_page(request: Request) -> Response:
    session, client = await client_of(request)
    params = request.query_params
    query = (params.get("q") or "").strip()
    mode = params.get("mode") or SearchMode.HYBRID.value
    if mode not in {m.value for m in SearchMode}:
        raise BadInput("mode must be keyword, vector or hybrid.")
    if len(query) > 4096:
        raise BadInput("The query is longer than 4,096 characters.")
    limit = int_param(params, "limit", 10, 1, 100)
    form = (
        '<form method="get" action="/search" role="search"><div class="row">'
        + field("Query", "q", value=query, required=True, size=50)
        + select("Mode", "mode", [(m.value, m.value) for m in SearchMode], mode)
        + field("Hits", "limit", value=limit, kind="number", min=1, max=100)
        + '<button type="submit">Search</button></div></form>'
    )
    if not query:
        return page(request, session, "Search", form, current="/search")
    found, why, context = await asyncio.gather(
        client.search_beads(query, limit=limit, mode=mode),
        client.why(query, hops=2),
        client.context(query, max_tokens=1000),
    )
    hits = "".join(
        f"<li><h3>{bead_link(h.bead.bead_id, h.bead.title)}</h3><p>{type_badge(h.bead.bead_type.value)} "
        f'<span class="meta">by {e(h.bead.created_by)} · {e(h.bead.visibility.value)} · '
        f"{when(h.bead.created_at)}</span></p>"
        + _explanation(
            h.score,
            ", ".join(f"{e(s.list)} #{s.rank} ({s.raw_score:.3f})" for s in h.explanation.sources),
            h.explanation.relevance, h.explanation.prior, h.explanation.notes,
        )
        + "</li>"
        for h in found.hits
    )
    why_beads = {n.bead.bead_id: n.bead for n in why.graph.nodes}
    depth = {n.bead.bead_id: n.depth for n in why.graph.nodes}
    body = (
        form
        + f'<section aria-labelledby="h-hits"><h2 id="h-hits">Hits ({len(found.hits)}, {e(mode)})</h2>'
        + (f"<ol>{hits}</ol>" if hits else '<p class="empty">No visible bead matches.</p>')
        + "</section>"
        + '<section aria-labelledby="h-why"><h2 id="h-why">Why: seeds and the graph around them</h2>'
        + _subgraph_list(why.seeds, why_beads, why.graph.edges, depth)
        + "</section>"
        + '<section aria-labelledby="h-context"><h2 id="h-context">Context an agent would receive</h2>'
        + f'<p class="meta">{context.tokens} of {context.max_tokens} tokens · {len(context.bead_ids)} beads · '
        f"{context.dropped} left out</p><pre>{e(context.text) or '(empty)'}</pre></section>"
    )
    return page(request, session, f"Search: {query}", body, current="/search")


# --- bead ------------------------------------------------------------------------------------------


NOT_VISIBLE = "This bead does not exist, or it is not visible to you."


async def bead_page(request: Request, *, error: str = "", status: int = 200) -> Response:
    session, client = await client_of(request)
    bead_id = valid_id(BEAD_ID, request.path_params["bead_id"], "bead")
    try:
        bead = await client.get_bead(bead_id)
        history, relationships = await asyncio.gather(client.get_history(bead_id), client.get_relationships(bead_id))
    except NotFound:
        return page(request, session, "Bead not found", f"<p>{e(NOT_VISIBLE)}</p>", status=404)
    facts = (
        '<dl class="facts">'
        f"<dt>Id</dt><dd>{e(bead.bead_id)}</dd><dt>Type</dt><dd>{type_badge(bead.bead_type.value)}</dd>"
        f"<dt>Importance</dt><dd>{bead.importance}</dd><dt>Visibility</dt><dd>{e(bead.visibility.value)}"
        + (f' in <a href="/groups/{e(bead.group_id)}/graph">{e(bead.group_id)}</a>' if bead.group_id else "")
        + f"</dd><dt>Status</dt><dd>{e(bead.status.value)}</dd><dt>Version</dt><dd>{bead.version}</dd>"
        f"<dt>Tags</dt><dd>{tags(bead)}</dd><dt>Session</dt><dd>{e(bead.session_id or '—')}</dd>"
        f"<dt>Created</dt><dd>{when(bead.created_at)} by {e(bead.created_by)}</dd>"
        f"<dt>Updated</dt><dd>{when(bead.updated_at)}</dd>"
        "</dl>"
    )
    provenance = (
        '<dl class="facts">'
        f"<dt>Provenance</dt><dd>{e(bead.provenance.value)}</dd>"
        f"<dt>Corroborated by</dt><dd>{e(', '.join(bead.corroborated_by) or 'nobody else')}</dd>"
        f"<dt>Valid from</dt><dd>{when(bead.valid_from) if bead.valid_from else 'always'}</dd>"
        f"<dt>Valid until</dt><dd>{when(bead.valid_to) if bead.valid_to else 'still holds'}</dd>"
        "</dl>"
    )
    marks = table(
        "Trust marks", ("Who", "Verdict", "When", "Note"),
        ((e(m.ai_id), e(m.verdict.value), when(m.at), e(m.note or "")) for m in bead.trust),
        empty="Nobody has verified or rejected this bead.",
    )
    trust_forms = ""
    if bead.created_by != session.ai_id:
        token = csrf_field(session.csrf)
        trust_forms = (
            f'<form method="post" action="/beads/{e(bead_id)}/verify" class="row">{token}'
            + field("Note (optional)", "note", maxlength=1000)
            + '<button type="submit">Verify</button></form>'
            f'<form method="post" action="/beads/{e(bead_id)}/reject" class="row">{token}'
            + field("Why it is wrong", "reason", required=True, maxlength=1000)
            + '<button type="submit" class="secondary">Reject</button></form>'
        )
    versions = table(
        "Versions (oldest first)", ("Offset", "Bead", "Status", "Created"),
        (
            (str(v.offset) + (" (this one)" if v.offset == 0 else ""), bead_link(v.bead.bead_id, v.bead.title),
             e(v.bead.status.value), when(v.bead.created_at))
            for v in history.versions
        ),
    )
    links = table(
        "Supersede links", ("Newer", "Older", "When", "By", "Why"),
        ((bead_link(x.new_id), bead_link(x.old_id), when(x.superseded_at), e(x.superseded_by), e(x.reason or ""))
         for x in history.links),
        empty="No supersede links.",
    )
    rels = table(
        "Relationships", ("Type", "Direction", "Other bead", "Created"),
        (
            (e(r.rel_type.value), "outgoing" if r.from_id == bead_id else "incoming",
             bead_link(r.to_id if r.from_id == bead_id else r.from_id), when(r.created_at))
            for r in relationships
        ),
        empty="No relationships you can see.",
    )
    body = (
        confirmation(request) + error_box(error)
        + '<section aria-labelledby="h-content"><h2 id="h-content">Content</h2>'
        + f'<pre class="content">{e(bead.content)}</pre></section>'
        + f'<section aria-labelledby="h-facts"><h2 id="h-facts">About</h2>{facts}</section>'
        + f'<section aria-labelledby="h-prov"><h2 id="h-prov">Provenance and validity</h2>{provenance}</section>'
        + f'<section aria-labelledby="h-trust"><h2 id="h-trust">Trust</h2>{marks}{trust_forms}</section>'
        + f'<section aria-labelledby="h-history"><h2 id="h-history">History</h2>{versions}{links}</section>'
        + f'<section aria-labelledby="h-rels"><h2 id="h-rels">Relationships</h2>{rels}</section>'
    )
    return page(request, session, bead.title, body, status=status)


async def bead_verify(request: Request) -> Response:
    return await _bead_trust(request, "verify")


async def bead_reject(request: Request) -> Response:
    return await _bead_trust(request, "reject")


async def _bead_trust(request: Request, verdict: str) -> Response:
    session, client = await client_of(request)
    bead_id = valid_id(BEAD_ID, request.path_params["bead_id"], "bead")
    fields = await checked_form(request, session)
    try:
        if verdict == "verify":
            await client.verify_bead(bead_id, fields.get("note") or None)
        else:
            if not fields.get("reason"):
                raise BadInput("Say why the bead is wrong.")
            await client.reject_bead(bead_id, fields["reason"])
    except NotFound:
        return page(request, session, "Bead not found", f"<p>{e(NOT_VISIBLE)}</p>", status=404)
    except RecallError as exc:
        return await bead_page(request, error=exc.message, status=status_of(exc))
    except BadInput as exc:
        return await bead_page(request, error=exc.message, status=exc.status)
    done = "verified" if verdict == "verify" else "rejected"
    return RedirectResponse(f"/beads/{bead_id}?done={done}", status_code=303)


# --- handoffs and sessions -------------------------------------------------------------------------


async def _handoff_briefs(client: RecallClient, gid: str) -> dict[str, MemoryBead]:
    """The group's handoff beads (each transfer stores its brief as one), by bead id."""
    tagged = await client.get_by_tag("handoff", limit=500)
    return {b.bead_id: b for b in tagged if b.group_id == gid and b.bead_type is BeadType.HANDOFF}


def _latest(handoff: Handoff | None, session: BrowserSession) -> str:
    if handoff is None:
        return '<p class="empty">No handoff in this group yet.</p>'
    ack = (
        f"acknowledged {when(handoff.acknowledged_at)}"
        if handoff.status == "acknowledged"
        else "pending acknowledgement"
    )
    form = ""
    if handoff.status == "pending" and handoff.to_ops == session.ai_id:
        form = (
            f'<form method="post" action="/handoffs/{e(handoff.handoff_id)}/acknowledge">{csrf_field(session.csrf)}'
            f'<input type="hidden" name="group" value="{e(handoff.group_id)}">'
            '<button type="submit">Acknowledge this handoff</button></form>'
        )
    return (
        f'<dl class="facts"><dt>Handoff</dt><dd>{e(handoff.handoff_id)}</dd><dt>From</dt><dd>{e(handoff.from_ops)}</dd>'
        f"<dt>To</dt><dd>{e(handoff.to_ops)}</dd><dt>When</dt><dd>{when(handoff.created_at)}</dd>"
        f"<dt>Status</dt><dd>{ack}</dd><dt>Brief bead</dt><dd>{bead_link(handoff.handoff_bead_id)}</dd></dl>{form}"
    )


async def handoffs_page(request: Request, *, error: str = "", status: int = 200) -> Response:
    session, client = await client_of(request)
    params = request.query_params
    groups = await client.list_groups()
    gid = params.get("group") or (groups[0].group_id if groups else "")
    if gid:
        valid_id(GROUP_ID, gid, "group")
    chooser = (
        '<form method="get" action="/handoffs" class="row">'
        + select("Group", "group", [(g.group_id, f"{g.name} ({g.group_id})") for g in groups], gid)
        + '<button type="submit">Show</button></form>'
    ) if groups else '<p class="empty">You are in no group.</p>'
    timeline = ""
    if gid:
        brief, past, briefs = await asyncio.gather(
            client.handoff_brief(gid, max_tokens=600), client.list_handoffs(gid), _handoff_briefs(client, gid)
        )
        rows = (
            (when(h.created_at), e(h.from_ops), e(h.to_ops),
             f"acknowledged {when(h.acknowledged_at)}" if h.acknowledged_at else e(h.status),
             f"<details><summary>Brief</summary><pre>{e(briefs[h.handoff_bead_id].content)}</pre></details>"
             if h.handoff_bead_id in briefs else "", bead_link(h.handoff_bead_id, "bead"))
            for h in past
        )
        timeline = (
            '<section aria-labelledby="h-latest"><h2 id="h-latest">Latest handoff</h2>'
            f"{_latest(brief.handoff, session)}"
            "</section>"
            '<section aria-labelledby="h-timeline"><h2 id="h-timeline">Timeline of ops transfers</h2>'
            '<p class="hint">Newest first, each with its acknowledgement.</p>'
            + table("Ops transfers", ("When", "From", "To", "Status", "Brief", "Bead"), rows, empty="No transfers yet.")
            + "</section>"
            '<section aria-labelledby="h-brief"><h2 id="h-brief">What a new ops would read</h2>'
            f"<pre>{e(brief.text) or '(nothing yet)'}</pre></section>"
        )
    session_id = (params.get("session") or "").strip()
    report = ""
    if session_id:
        valid_id(SESSION_ID, session_id, "session")
        try:
            owner, integrity = await asyncio.gather(client.get_session(session_id), client.check_session(session_id))
            problems = table(
                "Problems", ("Bead", "Problem"),
                ((bead_link(p.bead_id), e(p.problem)) for p in integrity.problems), empty="No problems found.",
            )
            report = (
                f'<dl class="facts"><dt>Session</dt><dd>{e(owner.session_id)}</dd>'
                f"<dt>Owner</dt><dd>{e(owner.owner)}</dd>"
                f"<dt>Group</dt><dd>{e(owner.group_id or '—')}</dd><dt>State</dt><dd>{e(owner.state)}</dd>"
                f"<dt>Beads you can see</dt><dd>{integrity.beads}</dd>"
                f"<dt>Integrity</dt><dd>{'ok' if integrity.ok else 'problems found'}</dd></dl>{problems}"
            )
        except RecallError as exc:
            report, status = error_box(exc.message), status_of(exc)
    check = (
        '<section aria-labelledby="h-session"><h2 id="h-session">Check a session</h2>'
        '<form method="get" action="/handoffs" class="row">'
        + (f'<input type="hidden" name="group" value="{e(gid)}">' if gid else "")
        + field("Session id", "session", value=session_id, required=True, placeholder="s_…")
        + f'<button type="submit">Check integrity</button></form>{report}</section>'
    )
    body = confirmation(request) + error_box(error) + chooser + timeline + check
    return page(request, session, "Handoffs and sessions", body, current="/handoffs", status=status)


async def handoff_acknowledge(request: Request) -> Response:
    session, client = await client_of(request)
    fields = await checked_form(request, session)
    handoff_id = request.path_params["handoff_id"]
    gid = fields.get("group", "")
    try:
        await client.acknowledge_handoff(handoff_id)
    except RecallError as exc:
        return await handoffs_page(request, error=exc.message, status=status_of(exc))
    target = "/handoffs?" + urlencode({"group": gid, "done": "acknowledged"} if GROUP_ID.fullmatch(gid) else {})
    return RedirectResponse(target, status_code=303)


# --- feed and audit --------------------------------------------------------------------------------


async def _audit_section(request: Request, client: RecallClient, gid: str) -> str:
    params = request.query_params
    member = (params.get("member") or "").strip() or None
    bead_id = (params.get("bead") or "").strip() or None
    entries = await client.audit_log(gid, member=member, bead_id=bead_id, limit=200)
    rows = (
        (when(x.at), e(x.ai_id), e(x.op), "allowed" if x.allowed else f"refused ({e(x.code)})",
         ", ".join(bead_link(b) for b in x.bead_ids))
        for x in entries
    )
    return (
        f'<form method="get" action="/groups/{e(gid)}/audit" class="row" aria-label="Filter the audit trail">'
        + field("Member", "member", value=member or "", placeholder="a_… or o_…")
        + field("Bead", "bead", value=bead_id or "", placeholder="b_…")
        + '<button type="submit">Filter</button></form>'
        + table("Who read and wrote the group's beads (newest first)", ("When", "Who", "Operation", "Outcome", "Beads"),
                rows, empty="No entries.")
    )


async def feed_page(request: Request) -> Response:
    session, client = await client_of(request)
    gid = valid_id(GROUP_ID, request.path_params["group_id"], "group")
    group = await client.list_members(gid)
    if _role(group, session.ai_id) == "ops":
        trail = await _audit_section(request, client, gid)
        audit = f'<section aria-labelledby="h-audit"><h2 id="h-audit">Audit trail</h2>{trail}</section>'
    else:
        audit = '<p class="hint">The audit trail of this group is shown to its ops only.</p>'
    body = (
        f'<p>Changes to the beads of {e(group.name)} you may see, as they happen (newest at the bottom).</p>'
        f'<p id="feed-status" role="status">Connecting…</p>'
        f'<ol id="feed" aria-live="polite" aria-relevant="additions" aria-label="Changes"'
        f'{data_attrs(events=f"/api/feed/{gid}/events")}></ol>'
        "<noscript><p>The live feed needs JavaScript.</p></noscript>"
        + audit
    )
    return page(request, session, f"Live feed: {group.name}", body, scripts=("/static/feed.js",))


async def audit_page(request: Request) -> Response:
    session, client = await client_of(request)
    gid = valid_id(GROUP_ID, request.path_params["group_id"], "group")
    group = await client.list_members(gid)
    try:
        section = await _audit_section(request, client, gid)
    except Forbidden as exc:
        return page(request, session, "Audit trail", error_box(exc.message), status=403)
    return page(request, session, f"Audit trail: {group.name}", section)
