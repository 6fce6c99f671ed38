"""NATS security (contract 2) against a real nats-server running the configuration `recall auth init` writes.

What must hold, from the design rather than the code: an identity comes from its NATS credentials, never from
the payload or headers. Agent A cannot publish on B's request subjects, cannot read B's replies (its own
inbox prefix only), cannot subscribe to B's notifications; a service publishes only its own events; nobody
connects without a key the account signed; and the hub, reading the caller from the subject, cannot be
talked into another caller by payload fields or headers.

Refusals are observed where they happen: the server's ``-ERR 'Permissions Violation …'`` reaching the
client's error callback (awaited, no sleeps), and — to show a refused message went nowhere — a subscriber
with the hub's rights that sees a later, allowed message from the same connection first (NATS keeps the
order of one publisher's messages).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nkeys
import pytest
from conftest import until
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from recall_client import RecallClient
from recall_hub.service.endpoints import HubService
from recall_hub.tooling import auth
from recall_hub.tooling.auth import (
    AuthBundle,
    AuthError,
    connect_options,
    decode_jwt,
    encode_jwt,
    format_creds,
    generate,
    identity_of,
    load_roster,
    read_creds,
)
from recall_hub.tooling.stack import EmbeddedStack
from recall_schemas import (
    CreateBead,
    ErrorReply,
    MemoryBead,
    NotFound,
    RecallTimeout,
    Unauthorized,
)
from recall_schemas.subjects import EVENTS_STREAM, event_subject, notify_subject, request_subject

pytestmark = pytest.mark.timeout(120)



def _id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(6)}"


OPS, A, B, OUTSIDER, SVC, GROUP = _id("o"), _id("a"), _id("a"), _id("a"), _id("svc"), _id("g")
ERROR_CODE = "Nats-Service-Error-Code"
EVERYTHING = {"pub": {"allow": [">"]}, "sub": {"allow": [">"]}}


def write_roster(path: Path, *, agents: list[str] | None = None, groups: bool = True) -> Path:
    roster: dict[str, Any] = {"ops": [OPS], "agents": agents or [A, B, OUTSIDER], "services": [SVC]}
    if groups:
        roster["groups"] = [{"id": GROUP, "name": "Security team", "ops": [OPS], "agents": [A]}]
    path.write_text(json.dumps(roster))  # JSON is YAML
    return path


class ServerErrors:
    """A nats-py ``error_cb`` that keeps what the server reported, so a test can await the one it expects."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._changed = asyncio.Condition()

    async def record(self, exc: Exception) -> None:
        async with self._changed:
            self.seen.append(str(exc).lower())
            self._changed.notify_all()

    def _match(self, fragments: tuple[str, ...]) -> str | None:
        return next((e for e in self.seen if all(f.lower() in e for f in fragments)), None)

    async def expect(self, *fragments: str) -> str:
        async with asyncio.timeout(5.0), self._changed:
            await self._changed.wait_for(lambda: self._match(fragments) is not None)
        found = self._match(fragments)
        assert found is not None
        return found


Connect = Callable[..., Awaitable[tuple[NATS, ServerErrors]]]


# --- a secure stack: nats-server with the generated config, redis+FalkorDB, a hub with the hub creds -------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> AuthBundle:
    base = tmp_path_factory.mktemp("secure")
    return generate(write_roster(base / "roster.yaml"), base / "auth")




@pytest.fixture
async def bus(secure_stack: EmbeddedStack, secure_hub: HubService) -> AsyncIterator[Connect]:
    """``await bus(creds_path, **nats_options)``: a raw connection with those credentials and its error log."""
    opened: list[NATS] = []

    async def connect(creds: Path, **options: Any) -> tuple[NATS, ServerErrors]:
        errors = ServerErrors()
        settings = {**connect_options(creds), **options}
        nc = await nats.connect(secure_stack.nats_url, error_cb=errors.record, allow_reconnect=False, **settings)
        opened.append(nc)
        return nc, errors

    yield connect
    for nc in opened:
        await nc.close()


@pytest.fixture
async def clients(secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle) -> AsyncIterator[
    Callable[..., Awaitable[RecallClient]]
]:
    """``await clients(ai_id)``: a RecallClient connected with that identity's own credentials file."""
    opened: list[RecallClient] = []

    async def connect(ai_id: str, **options: Any) -> RecallClient:
        client = RecallClient(ai_id, secure_stack.nats_url, creds=str(bundle.creds[ai_id]), **options)
        await client.connect()
        opened.append(client)
        return client

    yield connect
    for client in opened:
        await client.close()


async def watch(nc: NATS, subject: str) -> asyncio.Queue[Msg]:
    """Messages on ``subject`` as a queue; the subscription is in place at the server when this returns."""
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_message(msg: Msg) -> None:
        queue.put_nowait(msg)

    await nc.subscribe(subject, cb=on_message)
    await nc.flush()
    return queue


async def next_message(queue: asyncio.Queue[Msg]) -> Msg:
    return await asyncio.wait_for(queue.get(), 5.0)


# --- the positive path: the hub serves, under its own credentials ------------------------------------------


async def test_hub_serves_each_identity_as_itself(clients: Callable[..., Awaitable[RecallClient]]) -> None:
    alice, bob = await clients(A), await clients(B)
    bead = await alice.create_bead("Secure hello", "only for A")
    assert bead.created_by == A
    assert (await alice.get_bead(bead.bead_id)).bead_id == bead.bead_id
    with pytest.raises(NotFound):
        await bob.get_bead(bead.bead_id)


# --- A cannot act as B ---------------------------------------------------------------------------------------


async def test_agent_cannot_publish_requests_as_another(bus: Connect, bundle: AuthBundle) -> None:
    spy, _ = await bus(bundle.hub_creds)
    requests = await watch(spy, "recall.v1.req.>")
    alice, errors = await bus(bundle.creds[A])

    forged = request_subject(B, "get_bead")
    await alice.publish(forged, b'{"bead_id": "b_00000000"}')
    await errors.expect("permissions violation", f'publish to "{forged}"')

    marker = request_subject(A, "security_marker")
    await alice.publish(marker, b"")
    assert (await next_message(requests)).subject == marker, "the forged request reached a subscriber"


async def test_an_identity_may_not_send_more_than_a_request_can_hold(
    bus: Connect, bundle: AuthBundle, clients: Callable[..., Awaitable[RecallClient]], secure_hub: HubService,
    secure_stack: EmbeddedStack,
) -> None:
    """nats-server itself refuses an identity's message over its per-user payload limit (and closes only that
    identity's connection): it never reaches a hub, and everyone else is served on."""
    flooder, _ = await bus(bundle.creds[A])
    await flooder.publish(request_subject(A, "create_bead"), b"x" * (auth.IDENTITY_MAX_PAYLOAD + 1))
    server_log = secure_stack.data_dir / "logs" / "nats-server.log"
    refused = f"maximum payload exceeded: {auth.IDENTITY_MAX_PAYLOAD + 1} vs {auth.IDENTITY_MAX_PAYLOAD}"
    await until("nats-server refused the message", lambda: refused in server_log.read_text())
    await until("the flooder's connection closed", lambda: flooder.is_closed)
    bob = await clients(B)
    assert (await bob.create_bead("still served")).title == "still served"
    assert secure_hub.nc.is_connected and secure_hub.ingest.is_connected


async def test_an_identity_may_hold_only_so_many_subscriptions(
    bus: Connect, bundle: AuthBundle, secure_stack: EmbeddedStack
) -> None:
    agent, _ = await bus(bundle.creds[A])
    server_log = secure_stack.data_dir / "logs" / "nats-server.log"
    before = server_log.read_text().count("maximum subscriptions exceeded")
    for i in range(auth.IDENTITY_MAX_SUBS):
        await agent.subscribe(f"{notify_subject(A)}.{i}")
    await agent.flush()
    assert server_log.read_text().count("maximum subscriptions exceeded") == before
    await agent.subscribe(f"{notify_subject(A)}.one-too-many")
    await until(
        "nats-server refused the subscription",
        lambda: server_log.read_text().count("maximum subscriptions exceeded") > before,
    )


def test_only_the_hub_is_issued_without_connection_limits(bundle: AuthBundle) -> None:
    for path in [bundle.hub_creds, *bundle.creds.values()]:
        limits = decode_jwt(read_creds(path)[0])["nats"]
        expected = (-1, -1) if path == bundle.hub_creds else (auth.IDENTITY_MAX_PAYLOAD, auth.IDENTITY_MAX_SUBS)
        assert (limits["payload"], limits["subs"]) == expected, path.name


async def test_forged_request_gets_no_reply(bus: Connect, bundle: AuthBundle) -> None:
    alice, errors = await bus(bundle.creds[A])
    forged = request_subject(B, "get_recent")
    with pytest.raises(nats.errors.TimeoutError):
        # The publish is refused by the server, so no hub ever sees it; the deadline is the observation.
        await alice.request(forged, b"{}", timeout=0.5)
    await errors.expect("permissions violation", f'publish to "{forged}"')


async def test_agent_cannot_subscribe_to_another_inbox(bus: Connect, bundle: AuthBundle) -> None:
    alice, errors = await bus(bundle.creds[A])
    await alice.subscribe(f"_INBOX.{B}.>")
    await errors.expect("permissions violation", f'subscription to "_inbox.{B}.>"')
    await alice.subscribe("_INBOX.>")
    await errors.expect("permissions violation", 'subscription to "_inbox.>"')


async def test_agent_with_a_foreign_inbox_prefix_gets_no_replies(
    bus: Connect, clients: Callable[..., Awaitable[RecallClient]], bundle: AuthBundle
) -> None:
    bead = await (await clients(A)).create_bead("Reply target", "A's own bead")
    nc, errors = await bus(bundle.creds[A], inbox_prefix=f"_INBOX.{B}".encode())
    disguised = RecallClient(A, nc=nc, timeout=0.5, retries=0)
    with pytest.raises(RecallTimeout):
        await disguised.get_bead(bead.bead_id)
    await errors.expect("permissions violation", f'subscription to "_inbox.{B}.')


async def test_agent_cannot_subscribe_to_another_agents_notifications(bus: Connect, bundle: AuthBundle) -> None:
    alice, errors = await bus(bundle.creds[A])
    stolen: list[Msg] = []

    async def on_stolen(msg: Msg) -> None:
        stolen.append(msg)

    await alice.subscribe(notify_subject(B), cb=on_stolen)
    await errors.expect("permissions violation", f'subscription to "{notify_subject(B)}"')
    await alice.subscribe(f"{notify_subject(B)}.>", cb=on_stolen)
    await errors.expect("permissions violation", f'subscription to "{notify_subject(B)}.>"')
    own = await watch(alice, notify_subject(A))

    hub, _ = await bus(bundle.hub_creds)
    await hub.publish(notify_subject(B), b"for B only")
    await hub.publish(f"{notify_subject(B)}.handoff", b"for B only")
    await hub.publish(notify_subject(A), b"for A")
    assert (await next_message(own)).data == b"for A"
    assert stolen == [], "A received B's notifications"


async def test_hub_answers_only_into_the_callers_own_inbox(bus: Connect, bundle: AuthBundle) -> None:
    # The hub's response permission would let it answer any reply subject a requester names; A names one in
    # B's inbox, which B (legitimately) listens on.
    bob, _ = await bus(bundle.creds[B])
    planted = await bob.subscribe(f"_INBOX.{B}.>")
    await bob.flush()
    alice, _ = await bus(bundle.creds[A])
    await alice.publish(request_subject(A, "get_recent"), b"{}", reply=f"_INBOX.{B}.planted")
    reply = await alice.request(request_subject(A, "get_recent"), b"{}", timeout=5)
    assert not (reply.headers and ERROR_CODE in reply.headers), reply.data
    await bob.flush()  # anything the hub sent B before answering A is in B's pending queue by now
    assert planted.pending_msgs == 0, "the hub relayed A's request's answer into B's inbox"


# --- the hub's reading of the caller ---------------------------------------------------------------------


def error_code(msg: Msg) -> str:
    assert msg.headers and ERROR_CODE in msg.headers, f"expected an error reply, got {msg.data[:200]!r}"
    return str(ErrorReply.model_validate_json(msg.data).error.code.value)


async def test_payload_naming_another_caller_is_rejected(
    bus: Connect, clients: Callable[..., Awaitable[RecallClient]], bundle: AuthBundle
) -> None:
    alice, _ = await bus(bundle.creds[A])
    subject = request_subject(A, "create_bead")
    for field in ("created_by", "caller", "ai_id"):
        body = json.dumps({"title": "Spoofed", "content": "x", field: B}).encode()
        reply = await alice.request(subject, body, timeout=5)
        assert error_code(reply) == "invalid", field
    assert not [b for b in await (await clients(B)).get_recent(limit=100) if b.title == "Spoofed"]

    # An operation whose payload names the acting identity (the ops handing over): it must be the caller.
    handoff = {"group_id": GROUP, "from_ops": OPS, "to_agent": A, "context_summary": "spoof", "handoff_id": "h_spoof1"}
    reply = await alice.request(request_subject(A, "transfer_ops"), json.dumps(handoff).encode(), timeout=5)
    assert error_code(reply) in ("invalid", "forbidden")


async def test_headers_claiming_another_identity_change_nothing(
    bus: Connect, clients: Callable[..., Awaitable[RecallClient]], bundle: AuthBundle
) -> None:
    alice, _ = await bus(bundle.creds[A])
    claims = {
        "Nats-Caller": B,
        "Nats-User": B,
        "X-Recall-Caller": B,
        "Recall-Ai-Id": B,
        "Ai-Id": B,
        "From": B,
        "Authorization": f"Bearer {B}",
    }
    body = CreateBead(title="Header spoof", content="whose?", idempotency_key=uuid.uuid4().hex)
    reply = await alice.request(
        request_subject(A, "create_bead"), body.model_dump_json(exclude_unset=True).encode(), timeout=5, headers=claims
    )
    assert not (reply.headers and ERROR_CODE in reply.headers), reply.data
    bead = MemoryBead.model_validate_json(reply.data)
    assert bead.created_by == A
    with pytest.raises(NotFound):
        await (await clients(B)).get_bead(bead.bead_id)
    assert (await (await clients(A)).get_bead(bead.bead_id)).created_by == A


# --- events and JetStream ------------------------------------------------------------------------------------


async def test_event_publishers_publish_only_their_own_events(bus: Connect, bundle: AuthBundle) -> None:
    spy, _ = await bus(bundle.hub_creds)
    events = await watch(spy, "recall.v1.evt.>")
    service, svc_errors = await bus(bundle.creds[SVC])
    alice, a_errors = await bus(bundle.creds[A])

    for forged in (event_subject(A, "session.started"), request_subject(A, "get_recent")):
        await service.publish(forged, b"{}")
        await svc_errors.expect("permissions violation", f'publish to "{forged}"')
    forged = event_subject(B, "session.started")
    await alice.publish(forged, b"{}")
    await a_errors.expect("permissions violation", f'publish to "{forged}"')

    # Through JetStream: the stream stores it and the ack comes back on the publisher's private inbox.
    own = event_subject(SVC, "security.probe")
    ack = await service.jetstream(timeout=5).publish(own, b"{}")
    assert ack.stream == EVENTS_STREAM and ack.seq > 0
    assert (await next_message(events)).subject == own, "a forged event reached a subscriber"
    marker = event_subject(A, "security.probe")
    await alice.publish(marker, b"{}")
    assert (await next_message(events)).subject == marker, "a forged event reached a subscriber"


async def test_agents_cannot_use_the_jetstream_api(bus: Connect, bundle: AuthBundle) -> None:
    alice, errors = await bus(bundle.creds[A])
    with pytest.raises(nats.errors.TimeoutError):
        await alice.jetstream(timeout=0.5).stream_info(EVENTS_STREAM)
    await errors.expect("permissions violation", f'publish to "$js.api.stream.info.{EVENTS_STREAM.lower()}"')
    await alice.publish(f"$JS.API.CONSUMER.CREATE.{EVENTS_STREAM}", b"{}")
    await errors.expect("permissions violation", "$js.api.consumer.create")


# --- who may connect --------------------------------------------------------------------------------------


async def refused(url: str, **options: Any) -> str:
    errors = ServerErrors()
    with pytest.raises((nats.errors.Error, OSError)):
        nc = await nats.connect(url, error_cb=errors.record, allow_reconnect=False, connect_timeout=5, **options)
        await nc.close()
    return await errors.expect("authorization violation")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_user_seed() -> str:
    return bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)).decode()


async def test_only_keys_signed_by_the_account_connect(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path
) -> None:
    url = secure_stack.nats_url
    await refused(url)
    await refused(url, user=A, password="guess")
    await refused(url, token=A)

    a_jwt, _ = read_creds(bundle.creds[A])
    stolen = tmp_path / "stolen-jwt.creds"  # A's JWT without A's key: the nonce is signed by another key
    stolen.write_text(format_creds(a_jwt, new_user_seed()))
    await refused(url, user_credentials=str(stolen))

    # A's JWT with its permissions widened to everything: the account's signature no longer matches.
    header, _, signature = a_jwt.split(".")
    claims = decode_jwt(a_jwt)
    claims["nats"].update(EVERYTHING)
    widened = tmp_path / "widened.creds"
    widened_jwt = f"{header}.{b64url(json.dumps(claims).encode())}.{signature}"
    widened.write_text(format_creds(widened_jwt, read_creds(bundle.creds[A])[1]))
    await refused(url, user_credentials=str(widened))

    # A user JWT minted by an account key the operator never signed.
    rogue_account = nkeys.from_seed(bytearray(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_ACCOUNT)))
    user_seed = new_user_seed()
    user_public = bytes(nkeys.from_seed(bytearray(user_seed.encode())).public_key).decode()
    rogue_jwt = encode_jwt(rogue_account, user_public, A, {**EVERYTHING, "type": "user"})
    rogue = tmp_path / "rogue.creds"
    rogue.write_text(format_creds(rogue_jwt, user_seed))
    await refused(url, user_credentials=str(rogue))


async def test_client_fails_fast_on_foreign_or_refused_credentials(
    secure_stack: EmbeddedStack, secure_hub: HubService, bundle: AuthBundle, tmp_path: Path
) -> None:
    # A setup mistake, not an outage: Unauthorized, which no retry will fix.
    with pytest.raises(Unauthorized, match=B):
        await RecallClient(A, secure_stack.nats_url, creds=str(bundle.creds[B])).connect()
    stolen = tmp_path / "stolen.creds"
    stolen.write_text(format_creds(read_creds(bundle.creds[A])[0], new_user_seed()))
    with pytest.raises(Unauthorized, match="refused"):
        # Without the check, the first connect is retried forever (max_reconnect_attempts=-1).
        await asyncio.wait_for(RecallClient(A, secure_stack.nats_url, creds=str(stolen)).connect(), 10)


# --- generation: files, idempotence, rotation, revocation ---------------------------------------------------


def test_generated_files_hold_secrets_only_where_private(bundle: AuthBundle) -> None:
    config = bundle.server_config.read_text()
    assert not re.search(r"\bS[UAO][A-Z2-7]{40,}", config), "a seed in the server config"
    assert "resolver: MEMORY" in config and "jetstream: enabled" in config
    for path in [bundle.hub_creds, *bundle.creds.values()]:
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert set(bundle.creds) == {OPS, A, B, OUTSIDER, SVC}
    assert identity_of(bundle.creds[A]) == A
    assert identity_of(bundle.hub_creds) == auth.HUB_IDENTITY
    assert connect_options(bundle.creds[A])["inbox_prefix"] == f"_INBOX.{A}".encode()
    assert connect_options(bundle.creds[SVC])["inbox_prefix"] == f"_INBOX.{SVC}".encode()
    assert "inbox_prefix" not in connect_options(bundle.hub_creds)
    permissions = decode_jwt(read_creds(bundle.creds[A])[0])["nats"]
    assert permissions["pub"] == {"allow": [f"recall.v1.req.{A}.>", f"recall.v1.evt.{A}.>"]}
    assert permissions["sub"] == {"allow": [f"_INBOX.{A}.>", notify_subject(A), f"{notify_subject(A)}.>"]}


def test_a_file_that_is_not_credentials_is_refused_before_nats_sees_it(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.creds"
    bogus.write_text("user: a_x\npassword: nope\n")
    with pytest.raises(AuthError):
        connect_options(bogus)  # nats-py itself would loop forever looking for the JWT


@pytest.mark.parametrize(
    "roster",
    [
        {"agents": ["a_ok01", "a_ok01"]},
        {"agents": ["not-an-id"]},
        {"services": ["a_notsvc"]},
        {"ops": ["o_lead"], "groups": [{"id": "g_team", "ops": ["o_lead"], "agents": ["a_unlisted"]}]},
        {"ops": ["o_lead"], "groups": [{"id": "g_team", "ops": [], "agents": []}]},
        {"agents": ["a_ok01"], "admins": ["a_ok01"]},
    ],
)
def test_invalid_rosters_are_refused(tmp_path: Path, roster: dict[str, Any]) -> None:
    path = tmp_path / "roster.yaml"
    path.write_text(json.dumps(roster))
    with pytest.raises(AuthError):
        load_roster(path)


async def test_rerun_keeps_keys_rotate_and_removal_revoke(tmp_path: Path) -> None:
    roster = write_roster(tmp_path / "roster.yaml")
    out = tmp_path / "auth"
    first = generate(roster, out)
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    again = generate(roster, out)
    assert again.creds == first.creds
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files, "a re-run changed a file"

    old_a = tmp_path / "old-a.creds"
    old_a.write_bytes(first.creds[A].read_bytes())
    rotated = generate(roster, out, rotate=True)
    assert read_creds(rotated.creds[A])[1] != read_creds(old_a)[1]
    assert {A, B, auth.HUB_IDENTITY} <= set(rotated.revoked)

    old_b = tmp_path / "old-b.creds"
    old_b.write_bytes(rotated.creds[B].read_bytes())
    shrunk = generate(write_roster(tmp_path / "roster.yaml", agents=[A, OUTSIDER]), out)
    assert B not in shrunk.creds and not (out / "creds" / f"{B}.creds").exists()
    assert shrunk.revoked == [B]

    with EmbeddedStack(tmp_path / "stack", nats_config=shrunk.server_config) as stack:
        nc = await nats.connect(stack.nats_url, allow_reconnect=False, **connect_options(shrunk.creds[A]))
        await nc.close()
        await refused(stack.nats_url, user_credentials=str(old_a))
        await refused(stack.nats_url, user_credentials=str(old_b))


# --- groups from the roster -------------------------------------------------------------------------------


async def test_roster_groups_are_bootstrapped_by_their_ops(
    secure_stack: EmbeddedStack, bundle: AuthBundle, clients: Callable[..., Awaitable[RecallClient]]
) -> None:
    auth_dir = bundle.server_config.parent
    roster = auth_dir / auth.ROSTER_COPY
    assert await auth.bootstrap_groups(roster, secure_stack.nats_url, auth_dir) == [GROUP]
    assert await auth.bootstrap_groups(roster, secure_stack.nats_url, auth_dir) == []
    ops = await clients(OPS)
    assert [g.group_id for g in await ops.list_groups()].count(GROUP) == 1
    group = await ops.list_members(GROUP)
    assert group.created_by == OPS
    assert {(m.ai_id, m.role.value) for m in group.members} == {(OPS, "ops"), (A, "agent")}
    assert GROUP in {g.group_id for g in await (await clients(A)).list_groups()}
    assert GROUP not in {g.group_id for g in await (await clients(OUTSIDER)).list_groups()}

    # Additive only: a role changed since (A promoted) survives a re-run that lists A as an agent.
    await ops.add_member(GROUP, A, role="ops")
    assert await auth.bootstrap_groups(roster, secure_stack.nats_url, auth_dir) == []
    roles = {m.ai_id: m.role.value for m in (await ops.list_members(GROUP)).members}
    assert roles == {OPS: "ops", A: "ops"}
