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
from recall_client import RecallClient
from recall_hub.console import create_app
from recall_hub.tooling.stack import EmbeddedStack, free_port
from recall_schemas import NotFound
from starlette.applications import Starlette

BASE = "http://console.test"


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
            reply = await client.post("/login", data={"ai_id": ai_id, "next": "/groups"})
            assert reply.status_code == 303 and reply.headers["location"] == "/groups"
        yield client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no form token on the page"
    return match[1]


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
        bad_login = await anonymous.post("/login", data={"ai_id": "root"})
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
        assert (await reader.post("/login", data={"ai_id": team.reader})).status_code == 303
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
        refused = await anonymous.post("/login", data={"ai_id": "a_someoneelse"})
        assert refused.status_code == 400 and "no credentials" in refused.text
        assert (await anonymous.post("/login", data={"ai_id": "a_workerconsole"})).status_code == 303
    single = create_app("nats://127.0.0.1:1", creds_dir=tmp_path / "o_leadconsole.creds")
    async with browser(single, None) as anonymous:
        signed_in = await anonymous.get("/login", params={"next": "/search"})  # one identity: no questions
        assert signed_in.status_code == 303 and signed_in.headers["location"] == "/search"
        assert "recall_console" in signed_in.cookies
    with pytest.raises(ValueError, match=r"no <ai id>\.creds"):
        create_app("nats://127.0.0.1:1", creds_dir=tmp_path / "nothing-here")
