"""Events cannot stop event processing, and no identity can suppress another's event.

Every hostile payload an agent can publish on its own event subject ends settled with a bounded dead
letter, the consumer keeps running, and a good event published after them still applies. When the
dead letter itself cannot be recorded, the event is retried a bounded number of times and then
terminated. JetStream message ids cannot be used to make the server drop another identity's event.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import nats.js.errors
import pytest
from recall_client import RecallClient
from recall_hub.config import HubSettings
from recall_hub.service import events as service_events
from recall_hub.service.endpoints import HubService
from recall_hub.service.events import DEAD_LETTER_MAX_BYTES, ensure_streams
from recall_hub.service.server import running_hub
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import new_id
from recall_schemas.events import DeadLetter
from recall_schemas.subjects import (
    DEAD_LETTER_ROOT,
    DEAD_LETTER_STREAM,
    EVENT_ROOT,
    EVENTS_STREAM,
    HUB_EVENTS_CONSUMER,
    event_subject,
)

from tests.conftest import new_ai


@asynccontextmanager
async def _letters(nc) -> AsyncIterator[asyncio.Queue[tuple[int, DeadLetter]]]:
    """Dead letters as the hub publishes them: (bytes on the wire, letter)."""
    queue: asyncio.Queue[tuple[int, DeadLetter]] = asyncio.Queue()

    async def on_letter(msg) -> None:
        queue.put_nowait((len(msg.data), DeadLetter.model_validate_json(msg.data)))

    sub = await nc.subscribe(f"{DEAD_LETTER_ROOT}.>", cb=on_letter)
    await nc.flush()
    try:
        yield queue
    finally:
        await sub.unsubscribe()


Letters = asyncio.Queue[tuple[int, DeadLetter]]


def _message_id(publisher: str) -> dict[str, str]:
    """The header every event carries, as the client sets it."""
    return {"Nats-Msg-Id": f"{publisher}:{uuid.uuid4().hex}"}


async def _collect(queue: Letters, subjects: set[str]) -> dict[str, tuple[int, DeadLetter]]:
    """One letter per subject in ``subjects`` (letters of other tests' events are skipped)."""
    found: dict[str, tuple[int, DeadLetter]] = {}
    async with asyncio.timeout(30):
        while set(found) != subjects:
            size, letter = await queue.get()
            if letter.subject in subjects:
                assert letter.subject not in found, f"two letters for {letter.subject}"
                found[letter.subject] = (size, letter)
    return found


def _hostile(agent: str, settings: HubSettings) -> list[tuple[str, bytes, str]]:
    """(subject, payload, expected code): every kind of event an agent can send that can never apply."""
    started = event_subject(agent, "session.started")
    good_body = {"kind": "session.started", "event_id": uuid.uuid4().hex, "session_id": new_id("s")}
    just_under = settings.event_max_bytes - 100
    return [
        # 400 KB of control bytes: its letter used to copy it (x6 once JSON-escaped) past the NATS max payload
        (started, b"\x01" * 400_000, "invalid"),
        (started, os.urandom(4096), "invalid"),  # binary noise
        (started, b'{"kind": "session.started", "event_id": "e\xff\xfe", "session_id": "s_abcd1234"}', "invalid"),
        (started, b"[1, 2, 3]", "invalid"),  # valid JSON, not an object
        (started, b'"session.started"', "invalid"),
        (started, json.dumps({**good_body, "pad": "\x02" * just_under}).encode()[:just_under], "invalid"),
        (started, json.dumps({**good_body, "extra": ["x"] * 1000}).encode(), "invalid"),  # unknown field
        (started, b"[" * 100_000 + b"]" * 100_000, "invalid"),  # nesting deeper than any parser allows
        # valid JSON of the wrong kind for its subject
        (started, json.dumps({"kind": "group.created", "event_id": "x1", "group_id": new_id("g"), "name": "n"})
         .encode(), "invalid"),
        # wrong subject tokens: an unknown kind, a kind too long, no kind at all
        (event_subject(agent, "session.bogus"), json.dumps(good_body).encode(), "invalid"),
        (event_subject(agent, "session.started.extra"), json.dumps(good_body).encode(), "invalid"),
        (f"{EVENT_ROOT}.{agent}.x", json.dumps(good_body).encode(), "invalid"),
        # a publisher token that is no identity (anyone may publish there without NATS auth)
        (event_subject(f"x{secrets.token_hex(4)}", "session.started"), json.dumps(good_body).encode(), "forbidden"),
        (event_subject(f"a_{secrets.token_hex(4)}" + "z" * 200, "session.started"), b"{}", "forbidden"),
    ]


async def test_no_payload_stops_the_consumer_and_every_letter_is_bounded(connect, hub_service: HubService):
    agent = await connect()
    js = agent.nc.jetstream()
    hostile = _hostile(agent.ai_id, hub_service.ctx.settings)
    assert len({subject for subject, _, _ in hostile}) < len(hostile)  # several on one subject: sequential
    by_subject: dict[str, list[tuple[bytes, str]]] = {}
    for subject, payload, code in hostile:
        by_subject.setdefault(subject, []).append((payload, code))
    async with _letters(agent.nc) as letters:
        # One subject at a time, so each letter can be matched to its payload.
        for subject, cases in by_subject.items():
            for payload, code in cases:
                await js.publish(subject, payload, headers=_message_id(agent.ai_id))
                size, letter = (await _collect(letters, {subject}))[subject]
                assert letter.code == code, (subject, letter.reason)
                assert letter.payload_bytes == len(payload)
                assert letter.payload_sha256 == hashlib.sha256(payload).hexdigest()
                assert letter.truncated == (len(payload) > hub_service.ctx.settings.dead_letter_excerpt_bytes)
                assert letter.payload == payload[:1024].decode("utf-8", errors="replace")
                assert size <= 16 * 1024, f"a letter of {size} bytes for a {len(payload)}-byte event"
                assert len(letter.reason) <= 2048
        # After all of that, the consumer still runs and a good event applies.
        assert hub_service.events.running
        session, event_id = new_id("s"), uuid.uuid4().hex
        await agent.events.session_started(session, event_id=event_id)
        assert await hub_service.events.wait_for(event_id, publisher=agent.ai_id) == ["applied"]
        assert (await agent.get_session(session)).owner == agent.ai_id


async def test_the_streams_refuse_an_event_above_the_limit(connect, hub_service: HubService):
    agent = await connect()
    js = agent.nc.jetstream()
    limit = hub_service.ctx.settings.event_max_bytes
    with pytest.raises(nats.js.errors.APIError, match=r"(?i)maximum"):
        await js.publish(event_subject(agent.ai_id, "session.started"), b"{" * (limit + 1))
    info = await js.stream_info(EVENTS_STREAM)
    assert info.config.max_msg_size == limit
    assert (await js.stream_info(DEAD_LETTER_STREAM)).config.max_msg_size == DEAD_LETTER_MAX_BYTES


async def _assert_consumer_idle(service: HubService, js) -> None:
    """Every event delivered has been settled (acked or termed): nothing pending, nothing unacked."""
    await service.nc.flush()  # the hub's acks and terms have reached the server
    info = await js.consumer_info(EVENTS_STREAM, HUB_EVENTS_CONSUMER)
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


async def test_failures_while_handling_end_in_bounded_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with EmbeddedStack(tmp_path) as stack:
        settings = HubSettings(
            nats_url=stack.nats_url, falkordb_url=stack.redis_url, redis_url=stack.redis_url,
            embedder={"kind": "hash"}, event_retry_delay_s=0.05, event_max_deliveries=3,
        )
        async with running_hub(settings) as service, RecallClient(new_ai(), stack.nats_url) as agent:
            js = agent.nc.jetstream()
            await js.delete_stream(DEAD_LETTER_STREAM)  # every letter now fails to publish (no responders)
            subject = event_subject(agent.ai_id, "session.started")
            await js.publish(subject, b"\x01" * 400_000, headers=_message_id(agent.ai_id))
            # Retried while the letter cannot be recorded, then terminated: never stuck, never forever.
            assert await service.events.wait_for(subject, deliveries=3, within=20) == ["retry", "retry", "dead"]
            assert service.events.running
            good = uuid.uuid4().hex
            await agent.events.session_started(new_id("s"), event_id=good)
            assert await service.events.wait_for(good) == ["applied"]
            await _assert_consumer_idle(service, js)
            # With the dead-letter stream back, letters are recorded again.
            await ensure_streams(js, settings)
            async with _letters(agent.nc) as letters:
                await js.publish(subject, b"not json", headers=_message_id(agent.ai_id))
                _, letter = (await _collect(letters, {subject}))[subject]
            assert letter.payload == "not json" and letter.code == "invalid"
            assert (await js.stream_info(DEAD_LETTER_STREAM)).state.messages == 1

        # A store that never answers: a bounded number of attempts, each cut at the apply timeout, then
        # a letter saying so. (The hang is the domain call's; NATS and Redis are the real servers.)
        never = asyncio.Event()

        async def hang(*args: object) -> None:
            await never.wait()

        monkeypatch.setattr(service_events, "apply_event", hang)
        slow = settings.model_copy(update={"event_apply_timeout_s": 0.2})
        async with running_hub(slow) as service, RecallClient(new_ai(), stack.nats_url) as agent:
            event_id = uuid.uuid4().hex
            async with _letters(agent.nc) as letters:
                await agent.events.session_started(new_id("s"), event_id=event_id)
                assert await service.events.wait_for(event_id, deliveries=3) == ["retry", "retry", "dead"]
                subject = event_subject(agent.ai_id, "session.started")
                _, letter = (await _collect(letters, {subject}))[subject]
            assert (letter.code, letter.event_id, letter.deliveries) == ("unavailable", event_id, 3)
            assert "took too long" in letter.reason
            # The claim of each failed attempt was released: a later copy is not taken for a duplicate.
            assert await service.ctx.redis.get(service.ctx.keys.applied_event(agent.ai_id, event_id)) is None
            await _assert_consumer_idle(service, agent.nc.jetstream())


# --- message ids ---------------------------------------------------------------------------------


async def _published(publish: Callable[[], Awaitable[object]]) -> object:
    ack = await publish()
    assert not getattr(ack, "duplicate", False), "the server dropped the event as a duplicate"
    return ack


async def test_no_identity_can_suppress_anothers_event(connect, hub_service: HubService):
    victim, attacker = await connect(), await connect()
    attacker_js = attacker.nc.jetstream()
    events = hub_service.events
    event_id = uuid.uuid4().hex
    session = new_id("s")
    body = {"kind": "session.started", "event_id": event_id, "session_id": new_id("s")}
    async with _letters(attacker.nc) as letters:
        # The attacker publishes first under the id the victim's client used to send (<victim>:<event_id>).
        attack_subject = event_subject(attacker.ai_id, "session.started")
        await attacker_js.publish(
            attack_subject, json.dumps(body).encode(), headers={"Nats-Msg-Id": f"{victim.ai_id}:{event_id}"})
        _, letter = (await _collect(letters, {attack_subject}))[attack_subject]
        assert (letter.code, letter.publisher) == ("forbidden", attacker.ai_id)  # the attempt is on record
    # ... and under the same event id on its own subject: that is its own event.
    await attacker.events.session_started(body["session_id"], event_id=event_id)
    assert await events.wait_for(event_id, publisher=attacker.ai_id) == ["applied"]

    # What the victim's client sends (seen here because this test server has no auth).
    sent: asyncio.Queue[str] = asyncio.Queue()

    async def on_event(msg) -> None:
        sent.put_nowait((msg.headers or {}).get("Nats-Msg-Id", ""))

    spy = await attacker.nc.subscribe(event_subject(victim.ai_id, "session.started"), cb=on_event)
    await attacker.nc.flush()
    await _published(lambda: victim.events.session_started(session, event_id=event_id))
    assert await events.wait_for(event_id, publisher=victim.ai_id) == ["applied"]
    assert (await victim.get_session(session)).owner == victim.ai_id
    # The victim's retry of the same event is stored, delivered and recognised: applied once only.
    await _published(lambda: victim.events.session_started(session, event_id=event_id))
    assert await events.wait_for(event_id, deliveries=2, publisher=victim.ai_id) == ["applied", "duplicate"]
    ids = [await asyncio.wait_for(sent.get(), 10) for _ in range(2)]
    await spy.unsubscribe()
    # Message ids are the victim's own, fresh for every publish, and nothing an observer of the event
    # could derive: there was no id to publish under first.
    assert all(i.startswith(f"{victim.ai_id}:") and event_id not in i for i in ids) and ids[0] != ids[1]
    key = hub_service.ctx.keys.applied_event(victim.ai_id, event_id)
    assert await hub_service.ctx.redis.get(key) == b"1"


async def test_a_message_id_of_the_publishers_own_is_accepted(connect, hub_service: HubService):
    """Publishers that still send ``Nats-Msg-Id: <self>:<event_id>`` keep working."""
    agent = await connect()
    session, event_id = new_id("s"), uuid.uuid4().hex
    body = {"kind": "session.started", "event_id": event_id, "session_id": session}
    await agent.nc.jetstream().publish(
        event_subject(agent.ai_id, "session.started"), json.dumps(body).encode(),
        headers={"Nats-Msg-Id": f"{agent.ai_id}:{event_id}"})
    assert await hub_service.events.wait_for(event_id, publisher=agent.ai_id) == ["applied"]
    assert (await agent.get_session(session)).owner == agent.ai_id


async def test_the_duplicate_window_is_the_servers_minimum(hub_service: HubService):
    info = await hub_service.events.js.stream_info(EVENTS_STREAM)
    assert info.config.duplicate_window <= 0.1



async def test_a_publish_ack_aimed_at_anothers_event_subject_is_nobodys_event(connect, hub_service: HubService):
    """An identity may name any reply subject on its own publish; JetStream then sends its ack there.
    Aimed at another identity's event subject, that ack lands in the events stream under the victim's
    name. It carries no message id, so it is dead-lettered as nobody's, and the victim's events apply."""
    victim, attacker = await connect(), await connect()
    target = event_subject(victim.ai_id, "session.started")
    body = {"kind": "session.started", "event_id": uuid.uuid4().hex, "session_id": new_id("s")}
    async with _letters(attacker.nc) as letters:
        await attacker.nc.publish(
            event_subject(attacker.ai_id, "session.started"), json.dumps(body).encode(),
            reply=target, headers=_message_id(attacker.ai_id))
        assert await hub_service.events.wait_for(body["event_id"], publisher=attacker.ai_id) == ["applied"]
        _, letter = (await _collect(letters, {target}))[target]
    assert (letter.code, letter.publisher) == ("invalid", None)
    assert "Nats-Msg-Id" in letter.reason and '"stream"' in letter.payload  # the ack, not a forged event
    session, event_id = new_id("s"), uuid.uuid4().hex
    await victim.events.session_started(session, event_id=event_id)
    assert await hub_service.events.wait_for(event_id, publisher=victim.ai_id) == ["applied"]
