"""A client's notification subject carries what the hub sends — and whatever else the NATS server can be
made to deliver there. With the generated NATS permissions only the hub may publish on
``recall.v1.notify.B``, but an identity ``A`` that publishes an event with ``recall.v1.notify.B`` as its
reply subject makes JetStream send its publish ack (``{"stream": "RECALL_EVENTS", "seq": N}``) there: NATS
permissions do not cover the reply subject of a publish (docs/security.md). What must hold: such a
message, or any other that is not a ``Notification``, is skipped by ``notifications()`` and ``changes()``,
without an error, and the hub's notifications keep arriving.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from recall_client import RecallClient
from recall_client.client import NotificationStream
from recall_hub.context import HubContext
from recall_hub.service.endpoints import HubService
from recall_hub.tooling.auth import AuthBundle, connect_options, generate
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas.subjects import event_subject, notify_subject

from tests.conftest import ClientFactory, new_ai

pytestmark = pytest.mark.timeout(120)

NOT_NOTIFICATIONS = [
    b'{"stream":"RECALL_EVENTS","seq":7}',  # a JetStream publish ack
    b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}',
    b'{"kind":"change","change":{"cursor":"1-0"}}',  # the right kind, not a valid change
    b'{"kind":"nonsense"}',
    b"not json at all",
    b"",
]



async def spy_on(nc: NATS, subject: str) -> asyncio.Queue[Msg]:
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_message(msg: Msg) -> None:
        queue.put_nowait(msg)

    await nc.subscribe(subject, cb=on_message)
    await nc.flush()
    return queue


def client_complaints(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the client logged about the messages it got; reconnect attempts of clients left over from
    earlier tests (their servers already stopped) are not about these messages."""
    return [
        r.getMessage() for r in caplog.records
        if r.name.startswith("recall_client") and r.levelno >= logging.WARNING
        and "Connect call failed" not in r.getMessage()
    ]


# --- dev mode: anything published straight onto the subject -----------------------------------------------


@pytest.fixture
async def raw(stack: EmbeddedStack, hub: HubContext) -> AsyncIterator[NATS]:
    nc = await nats.connect(stack.nats_url, connect_timeout=10)
    yield nc
    await nc.drain()


async def test_messages_that_are_not_notifications_are_skipped_by_the_stream_and_the_feed(
    raw: NATS, connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="recall_client")
    ops, member = await connect(new_ai("o")), await connect(new_ai())
    group = await ops.create_group("junk on the wire")
    await ops.add_member(group.group_id, member.ai_id)
    subject = notify_subject(member.ai_id)
    spy = await spy_on(raw, subject)
    first = await ops.create_bead("before", group_id=group.group_id, visibility="group")
    feed = member.changes(group.group_id)
    # The feed subscribes to the notification subject before it replays, so it is listening now.
    assert (await asyncio.wait_for(anext(feed), 15)).bead_id == first.bead_id
    async with member.notifications() as stream:
        for junk in NOT_NOTIFICATIONS:
            await raw.publish(subject, junk)
        for _ in NOT_NOTIFICATIONS:  # delivered to the client's connection too (same server, same order)
            await asyncio.wait_for(spy.get(), 10)
        bead = await ops.create_bead("the real one", group_id=group.group_id, visibility="group")
        note = await asyncio.wait_for(anext(stream), 15)
        while note.change is not None and note.change.bead_id == first.bead_id:  # the first one's, if late
            note = await asyncio.wait_for(anext(stream), 15)
        assert note.kind == "change" and note.change is not None and note.change.bead_id == bead.bead_id
        assert (await asyncio.wait_for(anext(feed), 15)).bead_id == bead.bead_id
    await feed.aclose()
    assert client_complaints(caplog) == []


# --- secure mode: the real vector, a JetStream ack aimed at another identity -------------------------------


OPS, A, B = f"o_{secrets.token_hex(6)}", f"a_{secrets.token_hex(6)}", f"a_{secrets.token_hex(6)}"
GROUP = f"g_{secrets.token_hex(6)}"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    base = tmp_path_factory.mktemp("notify-secure")
    roster = {"ops": [OPS], "agents": [A, B]}
    (base / "roster.yaml").write_text(json.dumps(roster))
    return generate(base / "roster.yaml", base / "auth")




async def test_a_publish_ack_aimed_at_another_identity_does_not_break_its_notifications(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="recall_client")
    url = secure_stack.nats_url
    async with RecallClient(OPS, url, creds=str(bundle.creds[OPS])) as ops, \
            RecallClient(B, url, creds=str(bundle.creds[B])) as victim:
        await ops.create_group("notified", group_id=GROUP)
        await ops.add_member(GROUP, B)
        attacker = await nats.connect(url, connect_timeout=10, **connect_options(bundle.creds[A]))
        watcher = await nats.connect(url, connect_timeout=10, **connect_options(bundle.creds[B]))
        try:
            spy = await spy_on(watcher, notify_subject(B))
            stream: NotificationStream
            async with victim.notifications() as stream:
                # A may publish its own events; the reply subject it names is not checked by anyone.
                await attacker.publish(event_subject(A, "session.started"), b"{}", reply=notify_subject(B))
                ack = await asyncio.wait_for(spy.get(), 10)
                assert json.loads(ack.data)["stream"] == "RECALL_EVENTS", "JetStream's ack reached B's subject"
                bead = await ops.create_bead("after the ack", group_id=GROUP, visibility="group")
                note = await asyncio.wait_for(anext(stream), 15)
                assert note.change is not None and note.change.bead_id == bead.bead_id
        finally:
            await attacker.close()
            await watcher.close()
    assert client_complaints(caplog) == []
