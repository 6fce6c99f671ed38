"""The web console over HTTP, against the session's real hub: each browser session is one identity and
sees exactly what the hub lets that identity see, on every page and endpoint."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import uvicorn
from conftest import new_ai, until
from console_http import csrf_of, sign_in
from recall_client import RecallClient
from recall_hub.console import create_app
from recall_hub.console.api import end_reason
from recall_hub.console.auth import Identities
from recall_hub.console.graph import GraphFilters
from recall_hub.console.pool import CannotConnect, ClientPool
from recall_hub.console.sessions import Sessions
from recall_hub.console.settings import ConsoleSettings
from recall_hub.tooling.stack import EmbeddedStack, free_port
from recall_schemas import Forbidden, NotFound, Unavailable
from starlette.applications import Starlette
from starlette.routing import Route

BASE = "http://127.0.0.1:8800"


@pytest.fixture(scope="module")
async def app(stack: EmbeddedStack, hub: object) -> AsyncIterator[Starlette]:
    console = create_app(stack.nats_url, dev=True, secret="test-secret")
    yield console
    await console.state.console.close()


async def hub_client(app: Starlette, ai_id: str) -> RecallClient:
    """The very client the console uses for ``ai_id`` (to write what the pages then show)."""
    client: RecallClient = await app.state.console.pool.client(ai_id)
    return client


@asynccontextmanager
async def browser(app: Starlette, ai_id: str | None) -> AsyncIterator[httpx2.AsyncClient]:
    """A browser signed in as ``ai_id`` (None: not signed in), talking to the app in-process."""
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE) as client:
        if ai_id is not None:
            reply = await sign_in(client, ai_id)
            assert reply.status_code == 303 and reply.headers["location"] == "/groups"
        yield client


@dataclass
class Team:
    """An ops, two members (writer and reader) and an outsider; the writer's group bead, its private bead
    (with the group's id) and another group's bead."""

    ops: str
    writer: str
    reader: str
    outsider: str
    group_id: str
    shared_id: str
    private_id: str
    word: str


@pytest.fixture(scope="module")
async def team(app: Starlette) -> Team:
    ops_id, writer_id, reader_id, outsider_id = new_ai("o"), new_ai(), new_ai(), new_ai()
    ops = await hub_client(app, ops_id)
    group = (await ops.create_group("console team")).group_id
    for member in (writer_id, reader_id):
        await ops.add_member(group, member)
    writer = await hub_client(app, writer_id)
    word = f"zq{new_ai()[2:]}"
    shared = await writer.create_bead(f"Shared plan {word}", f"everyone in the team knows {word}",
                                      visibility="group", group_id=group, tags=["plan"], bead_type="decision")
    private = await writer.create_bead(f"Private doubt {word}", f"only the writer knows {word}",
                                       visibility="private", group_id=group, tags=["plan"])
    await writer.add_relationship(private.bead_id, shared.bead_id, "RELATED_TO")
    for ai_id in (ops_id, reader_id, outsider_id):
        (await hub_client(app, ai_id)).read_after(writer.index_position)
    return Team(ops_id, writer_id, reader_id, outsider_id, group, shared.bead_id, private.bead_id, word)


async def test_each_identity_sees_only_what_the_hub_lets_it_see(app: Starlette, team: Team) -> None:
    async with browser(app, team.writer) as writer, browser(app, team.reader) as reader, \
            browser(app, team.outsider) as outsider:
        # groups: members see the group with its members and roles; the outsider sees none
        page = await reader.get("/groups")
        assert page.status_code == 200 and team.group_id in page.text and team.writer in page.text
        assert "<main" in page.text and "<nav" in page.text
        assert team.group_id not in (await outsider.get("/groups")).text

        # graph JSON: the private bead is the writer's alone, and so is its edge
        mine = (await writer.get(f"/api/groups/{team.group_id}/graph")).json()
        theirs = (await reader.get(f"/api/groups/{team.group_id}/graph")).json()
        assert {team.shared_id, team.private_id} <= {n["id"] for n in mine["nodes"]}
        assert any(e["source"] == team.private_id for e in mine["edges"])
        assert team.shared_id in {n["id"] for n in theirs["nodes"]}
        assert team.private_id not in json.dumps(theirs)
        assert (await outsider.get(f"/api/groups/{team.group_id}/graph")).status_code == 404

        # search, why and context: the same query, different identities
        found = (await writer.get("/search", params={"q": team.word, "mode": "keyword"})).text
        assert team.private_id in found and team.shared_id in found
        for mode in ("keyword", "vector", "hybrid"):
            seen = await reader.get("/search", params={"q": team.word, "mode": mode})
            assert seen.status_code == 200 and "Context an agent would receive" in seen.text
            assert team.private_id not in seen.text and "Private doubt" not in seen.text
        assert team.shared_id in (await reader.get("/search", params={"q": team.word, "mode": "keyword"})).text
        assert team.shared_id not in (await outsider.get("/search", params={"q": team.word})).text

        # bead pages: hidden reads exactly like missing
        assert "Private doubt" in (await writer.get(f"/beads/{team.private_id}")).text
        hidden = await reader.get(f"/beads/{team.private_id}")
        missing = await reader.get("/beads/b_doesnotexist00")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.text == missing.text and "not visible to you" in hidden.text
        shared = await reader.get(f"/beads/{team.shared_id}")
        assert shared.status_code == 200 and team.private_id not in shared.text  # its edge is hidden too
        assert (await outsider.get(f"/beads/{team.shared_id}")).status_code == 404

        # the group's other pages: members only
        for path in (f"/groups/{team.group_id}/graph", f"/feed/{team.group_id}", f"/api/feed/{team.group_id}/events"):
            assert (await outsider.get(path)).status_code == 404, path
        assert (await reader.get(f"/groups/{team.group_id}/graph")).status_code == 200
        feed = await reader.get(f"/feed/{team.group_id}")
        assert 'aria-live="polite"' in feed.text and "shown to its ops only" in feed.text


async def test_ops_only_forms_are_refused_for_a_member_and_work_for_the_ops(app: Starlette, team: Team) -> None:
    newcomer = new_ai()
    async with browser(app, team.reader) as reader, browser(app, team.ops) as ops:
        groups = await reader.get("/groups")
        assert "Add member" not in groups.text  # no ops forms for a member ...
        token = csrf_of(groups.text)
        for path, form in (
            (f"/groups/{team.group_id}/members", {"ai_id": newcomer, "role": "agent"}),
            (f"/groups/{team.group_id}/members/remove", {"ai_id": team.writer}),
            (f"/groups/{team.group_id}/handoff", {"to_agent": team.writer, "brief": "take over"}),
        ):
            refused = await reader.post(path, data={**form, "csrf": token})  # ... and the hub refuses the posts
            assert refused.status_code == 403, path
            assert 'role="alert"' in refused.text and "only the ops" in refused.text
            assert "Traceback" not in refused.text
        assert (await reader.get(f"/groups/{team.group_id}/audit")).status_code == 403

        page = await ops.get("/groups")
        assert "Add member" in page.text and "Hand off ops" in page.text
        token = csrf_of(page.text)
        forged = await ops.post(f"/groups/{team.group_id}/members", data={"ai_id": newcomer, "csrf": "forged"})
        assert forged.status_code == 403 and "expired" in forged.text
        added = await ops.post(f"/groups/{team.group_id}/members", data={"ai_id": newcomer, "role": "agent",
                                                                         "csrf": token})
        assert added.status_code == 303 and added.headers["location"] == "/groups?done=added"
        assert newcomer in (await ops.get("/groups?done=added")).text
        bad = await ops.post(f"/groups/{team.group_id}/members", data={"ai_id": "not an id", "csrf": token})
        assert bad.status_code == 400 and 'role="alert"' in bad.text
        removed = await ops.post(f"/groups/{team.group_id}/members/remove", data={"ai_id": newcomer, "csrf": token})
        assert removed.status_code == 303

        audit = await ops.get(f"/groups/{team.group_id}/audit")
        assert audit.status_code == 200 and "get_bead" in audit.text and team.reader in audit.text
        assert team.private_id not in audit.text
        feed = await ops.get(f"/feed/{team.group_id}")
        assert "Audit trail" in feed.text and "create_bead" in feed.text


async def test_handoff_timeline_and_session_check(app: Starlette) -> None:
    ops_id, heir_id = new_ai("o"), new_ai("o")
    ops = await hub_client(app, ops_id)
    group = (await ops.create_group("handing over")).group_id
    await ops.add_member(group, heir_id)
    session_bead = await ops.create_bead("Session work", "step one", session_id="s_consoletest01", group_id=group,
                                         visibility="group")
    async with browser(app, ops_id) as old, browser(app, heir_id) as heir:
        token = csrf_of((await old.get("/groups")).text)
        handed = await old.post(f"/groups/{group}/handoff", data={"to_agent": heir_id, "brief": "Mind <the> gap",
                                                                  "csrf": token})
        assert handed.status_code == 303
        page = await heir.get("/handoffs", params={"group": group})
        assert page.status_code == 200 and "pending acknowledgement" in page.text
        assert "Mind &lt;the&gt; gap" in page.text and "Mind <the> gap" not in page.text
        form = re.search(r'action="(/handoffs/h_[a-z0-9]+/acknowledge)"', page.text)
        assert form, "the new ops is offered to acknowledge"
        acked = await heir.post(form[1], data={"csrf": csrf_of(page.text), "group": group})
        assert acked.status_code == 303
        assert "acknowledged" in (await heir.get("/handoffs", params={"group": group})).text
        # The hub's listing behind the timeline: newest first, each with its own acknowledgement; members only.
        back = await heir.post(f"/groups/{group}/handoff", data={
            "to_agent": ops_id, "brief": "Back to you", "csrf": csrf_of((await heir.get("/groups")).text)})
        assert back.status_code == 303
        listed = await (await hub_client(app, heir_id)).list_handoffs(group)
        assert [(h.from_ops, h.to_ops, h.status) for h in listed] == [
            (heir_id, ops_id, "pending"), (ops_id, heir_id, "acknowledged")
        ]
        assert listed[1].acknowledged_at is not None and listed[0].acknowledged_at is None
        timeline = (await old.get("/handoffs", params={"group": group})).text
        assert timeline.count("<details><summary>Brief</summary>") == 2 and "Back to you" in timeline
        with pytest.raises(NotFound):
            await (await hub_client(app, new_ai())).list_handoffs(group)
        check = await old.get("/handoffs", params={"group": group, "session": "s_consoletest01"})
        assert check.status_code == 200 and "Beads you can see</dt><dd>1<" in check.text
        assert session_bead.session_id == "s_consoletest01"
        assert (await old.get("/handoffs", params={"session": "bad id"})).status_code == 400


async def test_bad_input_gets_a_clear_4xx_page(app: Starlette, team: Team) -> None:
    async with browser(app, None) as anonymous:
        to_login = await anonymous.get("/groups")
        assert to_login.status_code == 303 and to_login.headers["location"].startswith("/login?next=")
        assert (await anonymous.get(f"/api/groups/{team.group_id}/graph")).status_code == 401
        bad_login = await sign_in(anonymous, "root")
        assert bad_login.status_code == 400 and "AI id" in bad_login.text
        anonymous.cookies.set("recall_console", "e30.0000")  # a cookie with a forged signature
        assert (await anonymous.get("/groups")).status_code == 303
    async with browser(app, team.reader) as reader:
        cases = {
            "/beads/not-a-bead": 400,
            "/beads/b_doesnotexist00": 404,
            "/groups/nonsense/graph": 400,
            "/groups/g_doesnotexist00/graph": 404,
            f"/groups/{team.group_id}/graph?type=bogus": 400,
            f"/groups/{team.group_id}/graph?since=yesterday": 400,
            "/search?q=x&mode=bogus": 400,
            "/search?q=x&limit=many": 400,
            "/feed/g_": 400,
            "/no/such/page": 404,
        }
        for path, status in cases.items():
            reply = await reader.get(path)
            assert reply.status_code == status, path
            assert "<main" in reply.text and "<h1>" in reply.text and "Traceback" not in reply.text, path
        api = f"/api/groups/{team.group_id}/graph"
        bad_queries = ("limit=abc", "limit=0", "limit=5001", "edges=-1", "type=nope", "tag=bad tag", "session=x",
                       "since=2025-02-01&until=2025-01-01")
        for query in bad_queries:
            reply = await reader.get(f"{api}?{query}")
            assert reply.status_code == 400 and reply.json()["error"], query
        assert (await reader.post("/beads/b_doesnotexist00/verify", data={"csrf": "x"})).status_code == 403
        filtered = (await reader.get(f"{api}?tag=plan&type=decision&since=2000-01-01")).json()
        assert [n["id"] for n in filtered["nodes"]] == [team.shared_id]
        assert (await reader.get(f"{api}?until=2000-01-01")).json()["nodes"] == []


async def test_bead_text_is_escaped_everywhere(app: Starlette, team: Team) -> None:
    writer = await hub_client(app, team.writer)
    bead = await writer.create_bead("<script>alert(1)</script>", '<img src=x onerror="alert(2)"> & more',
                                    visibility="group", group_id=team.group_id, tags=["xss"])
    (await hub_client(app, team.reader)).read_after(writer.index_position)
    async with browser(app, team.reader) as reader:
        pages = [
            await reader.get(f"/beads/{bead.bead_id}"),
            await reader.get("/search", params={"q": "script alert", "mode": "keyword"}),
        ]
        assert bead.bead_id in pages[1].text
        for page in pages:
            assert "<script>alert(1)</script>" not in page.text
            assert "<img src=x" not in page.text
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert '&lt;img src=x onerror=&quot;alert(2)&quot;&gt; &amp; more' in pages[0].text
        graph = (await reader.get(f"/api/groups/{team.group_id}/graph?tag=xss")).json()
        assert graph["nodes"][0]["title"] == "<script>alert(1)</script>"  # JSON: the page sets it as text
        assert reply_is_json(await reader.get(f"/api/groups/{team.group_id}/graph?tag=xss"))


def reply_is_json(reply: httpx2.Response) -> bool:
    return reply.headers["content-type"].startswith("application/json")


@asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[str]:
    """The app under uvicorn on a free port (server-sent events need a real stream)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        await until("the console serves", lambda: server.started, within=20)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_the_live_feed_delivers_a_change_made_after_connecting(app: Starlette, team: Team) -> None:
    writer = await hub_client(app, team.writer)
    async with served(app) as url, httpx2.AsyncClient(base_url=url, timeout=30) as reader:
        assert (await sign_in(reader, team.reader)).status_code == 303
        async with reader.stream("GET", f"/api/feed/{team.group_id}/events") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = aiter_events(stream)
            async with asyncio.timeout(30):
                backlog = []
                async for kind, data in events:
                    if kind == "ready":
                        break
                    backlog.append(data["bead_id"])
                assert team.shared_id in backlog and team.private_id not in backlog
                hidden = await writer.create_bead("Feed secret", visibility="private", group_id=team.group_id)
                news = await writer.create_bead("Feed news", "after connecting", visibility="group",
                                                group_id=team.group_id)
                seen = []
                async for kind, data in events:
                    assert kind == "change"
                    seen.append(data["bead_id"])
                    if data["bead_id"] == news.bead_id:
                        assert data["title"] == "Feed news" and data["action"] == "created"
                        break
                assert hidden.bead_id not in seen


async def aiter_events(stream: httpx2.Response) -> AsyncIterator[tuple[str, dict[str, object]]]:
    kind, data = "", ""
    async for line in stream.aiter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and kind:
            yield kind, json.loads(data)
            kind, data = "", ""


async def test_graph_json_of_2000_beads(app: Starlette) -> None:
    ops_id = new_ai("o")
    ops = await hub_client(app, ops_id)
    group = (await ops.create_group("big memory")).group_id
    started = time.perf_counter()
    items = await ops.create_beads(
        [
            {"title": f"Fact {i}", "content": f"fact number {i} of the big memory", "group_id": group,
             "visibility": "group", "importance": i % 11, "bead_type": ("fact", "decision", "note")[i % 3],
             "session_id": f"s_bigmemory{i // 200:02d}", "tags": [f"t{i % 5}"]}
            for i in range(2000)
        ],
        batch_size=128, concurrency=2,
    )
    assert all(item.error is None for item in items)
    stored = time.perf_counter() - started
    async with browser(app, ops_id) as console:
        timings = {}
        for edges in (300, 2000):
            started = time.perf_counter()
            reply = await console.get(f"/api/groups/{group}/graph", params={"edges": edges}, timeout=120)
            timings[edges] = time.perf_counter() - started
            data = reply.json()
            assert reply.status_code == 200 and len(data["nodes"]) == 2000
            assert data["edges_read_for"] == edges and data["edges"]
        print(
            f"\n2,000 beads stored in {stored:.1f} s; graph JSON: {timings[300]:.2f} s with edges for 300 beads, "
            f"{timings[2000]:.2f} s with edges for all 2,000 (hub timing of the last: {data['timing_ms']})"
        )
        assert timings[300] < 15
        # The batch read gives exactly the edges the per-bead read gives, among the beads shown.
        shown = {n["id"] for n in data["nodes"]}
        drawn = {(e["source"], e["target"], e["type"]) for e in data["edges"]}
        for bead_id in sorted(shown)[:40]:
            one_by_one = {
                (r.from_id, r.to_id, r.rel_type.value)
                for r in await ops.get_relationships(bead_id, direction="out") if r.to_id in shown
            }
            assert {e for e in drawn if e[0] == bead_id} == one_by_one, bead_id


async def test_credentials_mode_offers_only_the_identities_it_holds(tmp_path: Path) -> None:
    for ai_id in ("o_leadconsole", "a_workerconsole"):
        (tmp_path / f"{ai_id}.creds").write_text("placeholder: the login page only lists the ids\n")
    (tmp_path / "hub.creds").write_text("not an AI id: left out\n")
    app = create_app("nats://127.0.0.1:1", creds_dir=tmp_path, dev=True)
    async with browser(app, None) as anonymous:
        login = await anonymous.get("/login")
        assert 'value="o_leadconsole"' in login.text and 'value="a_workerconsole"' in login.text
        assert "hub" not in re.findall(r'<option value="([^"]+)"', login.text)
        refused = await sign_in(anonymous, "a_someoneelse")
        assert refused.status_code == 400 and "no credentials" in refused.text
        # Signing in connects first: a file that is no credentials file is said plainly, without its path.
        broken = await sign_in(anonymous, "a_workerconsole")
        assert broken.status_code == 403 and "credentials are missing, unreadable" in broken.text
        assert_no_path(broken.text, tmp_path)
        assert "recall_console" not in anonymous.cookies
    single = create_app("nats://127.0.0.1:1", creds_dir=tmp_path / "o_leadconsole.creds")
    async with browser(single, None) as anonymous:
        refused = await anonymous.get("/login", params={"next": "/search"})  # one identity: no questions asked
        assert refused.status_code == 403 and "cannot connect as o_leadconsole" in refused.text
        assert_no_path(refused.text, tmp_path)
    with pytest.raises(ValueError, match=r"no <ai id>\.creds"):
        create_app("nats://127.0.0.1:1", creds_dir=tmp_path / "nothing-here")


def assert_no_path(html: str, data_dir: Path) -> None:
    """Nothing of the console's filesystem reaches the browser: no directory of it, no file name."""
    parts = [part for part in data_dir.parts if len(part) > 3]
    assert parts and not [part for part in parts if part in html], parts
    assert ".creds" not in html and "Traceback" not in html


# --- protection against other sites ----------------------------------------------------------------

CROSS_SITE = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}


def who(html: str) -> str | None:
    """The identity a page says the browser acts as."""
    match = re.search(r"Acting as <strong>([^<]+)</strong>", html)
    return match[1] if match else None


async def test_the_sign_in_form_needs_its_token_and_another_site_cannot_sign_a_browser_in(app: Starlette) -> None:
    victim_id, attacker_id = new_ai(), new_ai()
    async with browser(app, None) as victim, browser(app, None) as attacker:
        no_token = await victim.post("/login", data={"ai_id": attacker_id, "next": "/groups"})
        assert no_token.status_code == 403 and "did not come from this console" in no_token.text
        assert "recall_console" not in victim.cookies
        # another browser's token is no good: it belongs to that browser's sign-in cookie
        theirs = csrf_of((await attacker.get("/login")).text)
        await victim.get("/login")
        stolen = await victim.post("/login", data={"ai_id": attacker_id, "csrf": theirs})
        assert stolen.status_code == 403 and "recall_console" not in victim.cookies
        # a good token, but posted by another site's page (the browser says so)
        token = csrf_of((await victim.get("/login")).text)
        for headers in (CROSS_SITE, {"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Referer": "https://evil.example/page"}, {"Sec-Fetch-Site": "same-site"}):
            refused = await victim.post("/login", data={"ai_id": attacker_id, "csrf": token}, headers=headers)
            assert refused.status_code == 403, headers
            assert "recall_console" not in victim.cookies, headers
        assert (await victim.get("/groups")).status_code == 303  # still not signed in
        # the console's own page posting: Origin and Sec-Fetch-Site say so
        own = {"Origin": BASE, "Sec-Fetch-Site": "same-origin"}
        signed_in = await victim.post("/login", data={"ai_id": victim_id, "csrf": token}, headers=own)
        assert signed_in.status_code == 303 and who((await victim.get("/groups")).text) == victim_id
        # signed in, the browser cannot be switched to another identity by another site either
        switched = await victim.post("/login", data={"ai_id": attacker_id, "csrf": token}, headers=CROSS_SITE)
        assert switched.status_code == 403 and who((await victim.get("/groups")).text) == victim_id


async def test_every_post_refuses_another_sites_form_and_changes_nothing(app: Starlette, team: Team) -> None:
    writer = await hub_client(app, team.writer)
    bead = await writer.create_bead("Trust me", visibility="group", group_id=team.group_id)
    newcomer = new_ai()
    forms = {
        "/login": {"ai_id": newcomer},
        "/logout": {},
        "/groups": {"name": "forged group"},
        "/groups/{group_id}/members": {"ai_id": newcomer, "role": "ops"},
        "/groups/{group_id}/members/remove": {"ai_id": team.writer},
        "/groups/{group_id}/handoff": {"to_agent": team.writer, "brief": "forged"},
        "/beads/{bead_id}/verify": {"note": "forged"},
        "/beads/{bead_id}/reject": {"reason": "forged"},
        "/handoffs/{handoff_id}/acknowledge": {"group": team.group_id},
    }
    posts = {r.path for r in app.routes if isinstance(r, Route) and r.methods and "POST" in r.methods}
    assert posts == set(forms), "a new form: add it here"
    ops = await hub_client(app, team.ops)

    async def state() -> object:
        groups = await ops.list_groups()
        return ([(g.group_id, sorted(m.ai_id for m in g.members)) for g in groups],
                (await ops.get_bead(bead.bead_id)).trust, await ops.list_handoffs(team.group_id))

    before = await state()
    async with browser(app, team.ops) as console:
        token = csrf_of((await console.get("/groups")).text)
        ids = {"group_id": team.group_id, "bead_id": bead.bead_id, "handoff_id": "h_doesnotexist00"}
        for path, form in forms.items():
            target = path.format(**ids)
            for data, headers in (
                (form, {}),  # no token
                ({**form, "csrf": "forged"}, {}),  # a wrong one
                ({**form, "csrf": "jeton-forgé"}, {}),  # not even ASCII
                ({**form, "csrf": token}, CROSS_SITE),  # the right one, posted by another site's page
                ({**form, "csrf": token}, {"Origin": "https://evil.example"}),
            ):
                reply = await console.post(target, data=data, headers=headers)
                assert reply.status_code == 403, (target, data, headers)
                assert who((await console.get("/groups")).text) == team.ops, (target, headers)
    assert await state() == before


async def test_signing_out_ends_the_session_for_every_copy_of_its_cookie(app: Starlette, team: Team) -> None:
    async with browser(app, team.reader) as reader:
        page = await reader.get("/groups")
        cookie, token = reader.cookies["recall_console"], csrf_of(page.text)
        assert who(page.text) == team.reader
        out = await reader.post("/logout", data={"csrf": token})
        assert out.status_code == 303 and out.headers["location"] == "/login"
    async with browser(app, None) as replay:
        replay.cookies.set("recall_console", cookie)  # the copied cookie, after the sign-out
        refused = await replay.get("/groups")
        assert refused.status_code == 303 and refused.headers["location"].startswith("/login")
        assert (await replay.get(f"/api/groups/{team.group_id}/graph")).status_code == 401
        stale = await replay.post(f"/groups/{team.group_id}/members", data={"ai_id": new_ai(), "csrf": token})
        assert stale.status_code == 303 and stale.headers["location"].startswith("/login")


async def test_sessions_end_at_their_age_and_the_oldest_go_beyond_the_limit() -> None:
    now = [0.0]
    sessions = Sessions(max_age_s=100, limit=3, clock=lambda: now[0])
    first, _ = sessions.start("a_first1")
    assert sessions.find(first) is not None and sessions.find("not-a-session") is None
    now[0] = 101
    assert sessions.find(first) is None
    cookies = [sessions.start(f"a_many{i}")[0] for i in range(4)]
    assert [sessions.find(c) is not None for c in cookies] == [False, True, True, True]


SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options", "referrer-policy")


def assert_protected(reply: httpx2.Response, what: str) -> None:
    for name in SECURITY_HEADERS:
        assert name in reply.headers, (what, name)
    policy = dict(d.strip().split(" ", 1) for d in reply.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'", what
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'self'", what
    assert "unsafe" not in reply.headers["content-security-policy"], what
    assert reply.headers["x-frame-options"] == "DENY" and reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["referrer-policy"] == "same-origin", what


async def test_every_response_carries_the_security_headers(app: Starlette, team: Team,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    async with browser(app, None) as anonymous:
        for path in ("/login", "/groups", "/static/graph.js", "/static/console.css", "/colours.css", "/no/such/page",
                     f"/api/groups/{team.group_id}/graph"):
            assert_protected(await anonymous.get(path), path)
        assert_protected(await anonymous.post("/login", data={"ai_id": "a_nobody"}), "a refused sign-in")
    async with browser(app, team.reader) as reader:
        token = csrf_of((await reader.get("/groups")).text)
        replies = {
            "a page": await reader.get("/groups"),
            "a bad id": await reader.get("/beads/not-a-bead"),
            "a hidden bead": await reader.get(f"/beads/{team.private_id}"),
            "the graph JSON": await reader.get(f"/api/groups/{team.group_id}/graph"),
            "a bad JSON query": await reader.get(f"/api/groups/{team.group_id}/graph?limit=0"),
            "a forged form": await reader.post(f"/groups/{team.group_id}/members", data={"csrf": "x"}),
            "a hub refusal": await reader.post(f"/groups/{team.group_id}/members",
                                               data={"ai_id": new_ai(), "csrf": token}),
            "a wrong method": await reader.delete("/groups"),
        }
        assert [r.status_code for r in replies.values()] == [200, 400, 404, 200, 400, 403, 403, 405]
        for what, reply in replies.items():
            assert_protected(reply, what)
            assert reply.headers["cache-control"] == "no-store", what
        assert (await reader.get("/static/graph.js")).headers.get("cache-control") != "no-store"

    def broken(params: object) -> None:
        raise RuntimeError("/var/lib/recall/secret.creds went missing")

    monkeypatch.setattr(GraphFilters, "parse", broken)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app, raise_app_exceptions=False),
                                  base_url=BASE) as client:
        assert (await sign_in(client, team.reader)).status_code == 303
        crashed = await client.get(f"/groups/{team.group_id}/graph")
    assert crashed.status_code == 500 and "reference" in crashed.text
    assert "secret.creds" not in crashed.text and "Traceback" not in crashed.text
    assert_protected(crashed, "the unexpected-error page")


async def test_pages_carry_no_inline_script_or_style(app: Starlette, team: Team) -> None:
    """The Content-Security-Policy allows neither, so the pages must not need them."""
    async with browser(app, None) as anonymous:
        pages = {"/login": (await anonymous.get("/login")).text}
    async with browser(app, team.ops) as ops:
        for path in ("/groups", f"/groups/{team.group_id}/graph", f"/search?q={team.word}&mode=keyword",
                     f"/beads/{team.shared_id}", f"/handoffs?group={team.group_id}", f"/feed/{team.group_id}",
                     f"/groups/{team.group_id}/audit", "/beads/b_doesnotexist00"):
            reply = await ops.get(path)
            assert reply.status_code in (200, 404), path
            pages[path] = reply.text
    for path, html in pages.items():
        assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == [], path
        assert re.findall(r"<[^>]+\sstyle=", html) == [] and "<style" not in html, path
        assert re.findall(r"<[^>]+\son[a-z]+=", html) == [], path
    assert 'class="type bead-type-decision"' in pages[f"/beads/{team.shared_id}"]
    colours = (await anonymous_get(app, "/colours.css")).text
    assert ".bead-type-decision { --type-colour: #d62728; }" in colours


async def anonymous_get(app: Starlette, path: str) -> httpx2.Response:
    async with browser(app, None) as anonymous:
        return await anonymous.get(path)


async def test_the_console_answers_only_to_its_allowed_host_names(stack: EmbeddedStack) -> None:
    app = create_app(stack.nats_url, dev=True)  # default: loopback names only
    async with browser(app, None) as console:
        for host in ("127.0.0.1:8800", "localhost", "[::1]:8800", "LOCALHOST.:80"):
            assert (await console.get("/login", headers={"Host": host})).status_code == 200, host
        rebound = await console.get("/login", headers={"Host": "evil.example:8800"})
        assert rebound.status_code == 400 and "host name" in rebound.text
        assert_protected(rebound, "a refused host")
    named = create_app(stack.nats_url, dev=True, settings=ConsoleSettings(allowed_hosts="console.example"))
    async with browser(named, None) as console:
        assert (await console.get("/login", headers={"Host": "console.example"})).status_code == 200
        assert (await console.get("/login")).status_code == 400
    await app.state.console.close()
    await named.state.console.close()


async def test_the_graph_filter_form_is_valid_as_served(app: Starlette, team: Team) -> None:
    """Every number field's value lies within its own bounds, or the browser would never submit the form."""
    async with browser(app, team.reader) as reader:
        html = (await reader.get(f"/groups/{team.group_id}/graph")).text
    number = r'<input id="f-(\w+)" name="\w+" type="number" value="(\d+)"[^>]*min="(\d+)" max="(\d+)"'
    numbers = re.findall(number, html)
    assert {name for name, *_ in numbers} == {"limit", "edges"}
    for name, value, low, high in numbers:
        assert int(low) <= int(value) <= int(high), name


# --- the hub connections -----------------------------------------------------------------------------


async def test_the_pool_replaces_its_oldest_idle_connection_at_the_cap_and_refuses_when_all_are_busy(
        stack: EmbeddedStack, hub: object) -> None:
    now = [0.0]
    pool = ClientPool(stack.nats_url, Identities(dev=True, creds_dir=None), max_clients=2, idle_s=600,
                      clock=lambda: now[0])
    first, second, third, fourth = (new_ai() for _ in range(4))
    try:
        oldest = await pool.client(first)
        now[0] = 1
        await pool.client(second)
        now[0] = 2
        async with pool.holding(third) as held:  # the cap: the connection idle the longest makes room
            assert sorted(pool.connected) == sorted([second, third])
            with pytest.raises(Unavailable):
                oldest.nc  # noqa: B018 (closed: it has no connection any more)
            async with pool.holding(second):  # both busy: a fourth identity is refused, plainly
                with pytest.raises(CannotConnect, match=r"as many identities as it may \(2\), all of them busy"):
                    await pool.hold(fourth)
                assert sorted(pool.connected) == sorted([second, third])
            assert await held.list_groups() == []  # the held connection was never touched
        await pool.client(fourth)  # second is idle again (released last by now): it gives way
        assert sorted(pool.connected) == sorted([third, fourth])
    finally:
        await pool.close()
    assert pool.connected == []


async def test_a_connection_idle_for_longer_than_the_setting_is_closed(stack: EmbeddedStack, hub: object) -> None:
    now = [0.0]
    pool = ClientPool(stack.nats_url, Identities(dev=True, creds_dir=None), idle_s=60, clock=lambda: now[0])
    idle, streaming = new_ai(), new_ai()
    try:
        await pool.client(idle)
        async with pool.holding(streaming) as held:  # a live feed holds its client however long it runs
            now[0] = 59
            assert await pool.close_idle() == [] and sorted(pool.connected) == sorted([idle, streaming])
            now[0] = 60
            assert await pool.close_idle() == [idle] and pool.connected == [streaming]
            now[0] = 10_000
            assert await pool.close_idle() == []
            assert await held.list_groups() == []
        now[0] = 10_059
        assert await pool.close_idle() == [] and pool.connected == [streaming]
        now[0] = 10_060
        assert await pool.close_idle() == [streaming] and pool.connected == []
    finally:
        await pool.close()

    # Served, on the real clock: the console's own sweep closes an identity's connection once idle.
    app = create_app(stack.nats_url, dev=True, settings=ConsoleSettings(client_idle_s=0.2))
    console = app.state.console
    try:
        async with browser(app, idle) as signed_in:
            assert (await signed_in.get("/groups")).status_code == 200
            await until("the idle connection is closed", lambda: idle not in console.pool.connected, within=10)
            assert (await signed_in.get("/groups")).status_code == 200  # the next request connects again
    finally:
        await console.close()


async def test_sign_in_at_the_cap_with_every_connection_busy_is_refused_plainly(
        stack: EmbeddedStack, hub: object) -> None:
    app = create_app(stack.nats_url, dev=True, settings=ConsoleSettings(max_clients=1))
    pool: ClientPool = app.state.console.pool
    busy, idle_then_replaced, refused = new_ai(), new_ai(), new_ai()
    try:
        async with browser(app, idle_then_replaced), browser(app, busy) as signed_in:
            assert pool.connected == [busy]  # the first identity was idle: it made room
            async with pool.holding(busy):
                async with browser(app, None) as late:
                    reply = await sign_in(late, refused)
                    assert reply.status_code == 503 and "as many identities as it may (1)" in reply.text
                    assert "recall_console" not in late.cookies
                page = await signed_in.get("/groups")
                assert page.status_code == 200 and who(page.text) == busy
    finally:
        await app.state.console.close()


def test_a_feed_that_ends_tells_the_browser_no_address() -> None:
    assert end_reason(Unavailable("cannot reach NATS at nats://10.0.0.5:4222 within 5s")) == (
        "the connection to the hub closed"
    )
    assert end_reason(RuntimeError("/var/lib/recall/auth/creds/a_x.creds")) == "the connection to the hub closed"
    assert end_reason(Forbidden("only members may read the feed")) == "only members may read the feed"
