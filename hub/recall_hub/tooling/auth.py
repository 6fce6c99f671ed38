"""NATS security: from a roster of identities to a nats-server configuration and one credentials file each.

Design (docs/security.md has the reasoning): NATS decentralised auth in its config-file form. ``auth init``
keeps an operator, a system account and one ``RECALL`` account (JetStream on), and issues every identity
— the hub, each ops/agent AI id, each event-publishing service — a user nkey and a user JWT, signed by the
account, that carries that identity's publish/subscribe permissions. The server config holds only public
material (the operator and account JWTs, a memory resolver); each ``creds/<id>.creds`` is a standard NATS
credentials file (JWT + seed) that nats-py takes as ``user_credentials`` and that proves its key by signing
the server's nonce, so no secret ever crosses the wire or sits in the server config.

Permissions (the whole point: the hub trusts the caller token of the subject):

* AI id ``X`` (``o_…``/``a_…``): publish only ``recall.v1.req.X.>`` and ``recall.v1.evt.X.>``; subscribe
  only ``_INBOX.X.>`` and ``recall.v1.notify.X`` (and below it). No ``$JS.API``: an agent can publish
  into the event stream (the ack comes back on its inbox) but cannot read, create or delete streams or
  consumers.
* Service ``svc_…``: publish only ``recall.v1.evt.<svc>.>``; subscribe only ``_INBOX.<svc>.>``.
* Hub (``recall-hub``): subscribe requests, events, ``$SRV`` and inboxes; publish notifications, dead
  letters, JetStream API/acks/flow control and ``$SRV``; answer requests only through
  response permissions (it may publish once to the reply subject of a request it received).

The account's default permissions deny everything, so a user JWT minted without permissions gets nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nkeys
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from recall_schemas.creds import jwt_claims, parse_creds
from recall_schemas.ids import AI_ID_PATTERN, SERVICE_ID_PATTERN, AgentId, GroupId, OpsId, ServiceId
from recall_schemas.subjects import (
    DEAD_LETTER_ROOT,
    EVENT_ROOT,
    NOTIFY_ROOT,
    REQUEST_ROOT,
    inbox_prefix,
)

log = logging.getLogger(__name__)

HUB_IDENTITY = "recall-hub"
"""The user name of the hub in its JWT; every hub replica uses the same credentials."""
ACCOUNT_NAME = "RECALL"
SYSTEM_ACCOUNT_NAME = "SYS"
OPERATOR_NAME = "nexus-recall"

SERVER_CONFIG = "nats-server.conf"
HUB_CREDS = "hub.creds"
CREDS_DIR = "creds"
KEYS_DIR = "keys"
STATE_FILE = "state.json"
ROSTER_COPY = "roster.yaml"

_AI = re.compile(AI_ID_PATTERN)
_SERVICE = re.compile(SERVICE_ID_PATTERN)
_JWT_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
_NO_LIMIT = -1


class AuthError(RuntimeError):
    """A roster, key store or credentials file that cannot be used."""


# --- the roster -------------------------------------------------------------------------------------------


class RosterGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: GroupId
    name: str | None = Field(default=None, max_length=200, description="Default: the group id")
    ops: list[OpsId] = Field(min_length=1, description="The first ops creates the group; the others join as ops")
    agents: list[AgentId] = Field(default_factory=list)


class Roster(BaseModel):
    """Who may connect: ops, agents, services, and the groups the hub should hold (see :func:`bootstrap_groups`)."""

    model_config = ConfigDict(extra="forbid")

    ops: list[OpsId] = Field(default_factory=list)
    agents: list[AgentId] = Field(default_factory=list)
    services: list[ServiceId] = Field(default_factory=list)
    groups: list[RosterGroup] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Roster:
        every = [*self.ops, *self.agents, *self.services]
        duplicates = sorted({i for i in every if every.count(i) > 1})
        if duplicates:
            raise ValueError(f"listed more than once: {', '.join(duplicates)}")
        group_ids = [g.id for g in self.groups]
        if len(set(group_ids)) != len(group_ids):
            raise ValueError("a group id is listed more than once")
        for group in self.groups:
            unknown = [i for i in group.ops if i not in self.ops] + [i for i in group.agents if i not in self.agents]
            if unknown:
                raise ValueError(f"group {group.id} names ids missing from ops/agents: {', '.join(unknown)}")
        return self

    @property
    def ai_ids(self) -> list[str]:
        return [*self.ops, *self.agents]


def load_roster(path: Path | str) -> Roster:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise AuthError(f"cannot read roster {path}: {exc}") from exc
    try:
        return Roster.model_validate(raw)
    except ValidationError as exc:
        raise AuthError(f"invalid roster {path}: {exc}") from exc


# --- permissions ------------------------------------------------------------------------------------------


def ai_permissions(ai_id: str) -> dict[str, Any]:
    """What an ops/agent may do: call the API as itself, publish its own events, hear its inbox and notices."""
    if not _AI.match(ai_id):
        raise AuthError(f"{ai_id!r} is not an AI id")
    notify = f"{NOTIFY_ROOT}.{ai_id}"
    return {
        "pub": {"allow": [f"{REQUEST_ROOT}.{ai_id}.>", f"{EVENT_ROOT}.{ai_id}.>"]},
        "sub": {"allow": [f"{inbox_prefix(ai_id)}.>", notify, f"{notify}.>"]},
    }


def service_permissions(service_id: str) -> dict[str, Any]:
    """What an event-publishing service may do: publish its own events (acks arrive on its inbox)."""
    if not _SERVICE.match(service_id):
        raise AuthError(f"{service_id!r} is not a service id (svc_…)")
    return {
        "pub": {"allow": [f"{EVENT_ROOT}.{service_id}.>"]},
        "sub": {"allow": [f"{inbox_prefix(service_id)}.>"]},
    }


def hub_permissions() -> dict[str, Any]:
    """The hub serves requests (replying only to requests it received), consumes events, feeds changes."""
    return {
        "pub": {
            "allow": [
                f"{NOTIFY_ROOT}.>",
                f"{DEAD_LETTER_ROOT}.>",
                "$JS.API.>",
                "$JS.ACK.>",
                "$JS.FC.>",
                "$SRV.>",
            ]
        },
        "sub": {"allow": [f"{REQUEST_ROOT}.>", f"{EVENT_ROOT}.>", "$SRV.>", "_INBOX.>"]},
        # Replies go to the requester's private inbox: allowed once per received request, nowhere else.
        "resp": {"max": 1, "ttl": 0},
    }


# --- nkeys and JWTs ---------------------------------------------------------------------------------------


def _new_key(prefix: int) -> Any:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(secrets.token_bytes(32), prefix)))


def _key_from_seed(seed: str) -> Any:
    try:
        return nkeys.from_seed(bytearray(seed.strip().encode()))
    except Exception as exc:  # nkeys raises its own error types, and binascii errors on bad base32
        raise AuthError(f"not an nkey seed ({type(exc).__name__})") from exc


def _public(kp: Any) -> str:
    return bytes(kp.public_key).decode()


def _seed(kp: Any) -> str:
    return bytes(kp.seed).decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode_jwt(signer: Any, subject: str, name: str, nats: dict[str, Any], issued_at: int | None = None) -> str:
    """A NATS v2 JWT about ``subject`` (a public nkey), signed by the ``signer`` key pair.

    As nats-io/jwt encodes it: header ``ed25519-nkey``; ``jti`` is the base32 SHA-512/256 of the standard
    claims; the signature covers ``header.payload``; all parts base64url without padding.
    """
    standard = {"iat": int(time.time()) if issued_at is None else issued_at, "iss": _public(signer)}
    standard.update(name=name, sub=subject)
    jti = base64.b32encode(hashlib.new("sha512_256", _compact(standard)).digest()).decode().rstrip("=")
    claims = {"jti": jti, **standard, "nats": {**nats, "version": 2}}
    signing_input = f"{_b64url(_compact(_JWT_HEADER))}.{_b64url(_compact(claims))}"
    return f"{signing_input}.{_b64url(bytes(signer.sign(signing_input.encode())))}"


def decode_jwt(token: str) -> dict[str, Any]:
    """The claims of a JWT, *unverified* (the server verifies; this only reads names and compares)."""
    try:
        return jwt_claims(token)
    except ValueError as exc:
        raise AuthError(str(exc)) from exc


def _reuse_or_encode(
    old: str | None, signer: Any, subject: str, name: str, nats: dict[str, Any]
) -> str:
    """Keep ``old`` when it already says exactly this (so a re-run rewrites nothing), else sign anew."""
    if old:
        try:
            claims = decode_jwt(old)
        except AuthError:
            claims = {}
        wanted = {"iss": _public(signer), "sub": subject, "name": name, "nats": {**nats, "version": 2}}
        if all(claims.get(k) == v for k, v in wanted.items()):
            return old
    return encode_jwt(signer, subject, name, nats)


IDENTITY_MAX_PAYLOAD = (512 + 16) << 10
"""Bytes one message of an AI or service identity may carry (headers included): the hub's request limit
(``RECALL_MAX_PAYLOAD_BYTES``, 512 KiB by default) plus room for headers. nats-server refuses a larger
publish itself, so it never reaches a hub."""
IDENTITY_MAX_SUBS = 1000
"""Subscriptions one connection of an AI or service identity may hold (a client needs a handful: its inbox,
notifications, a change feed or two), so no identity can fill the server with them."""


def _user_claims(permissions: dict[str, Any], limited: bool) -> dict[str, Any]:
    """A user's claims: its permissions and, for every identity but the hub, per-connection limits."""
    payload, subs = (IDENTITY_MAX_PAYLOAD, IDENTITY_MAX_SUBS) if limited else (_NO_LIMIT, _NO_LIMIT)
    return {**permissions, "subs": subs, "data": _NO_LIMIT, "payload": payload, "type": "user"}


def _account_claims(jetstream: bool, revocations: dict[str, int], deny_by_default: bool) -> dict[str, Any]:
    limits: dict[str, Any] = {
        "subs": _NO_LIMIT,
        "data": _NO_LIMIT,
        "payload": _NO_LIMIT,
        "imports": _NO_LIMIT,
        "exports": _NO_LIMIT,
        "wildcards": True,
        "disallow_bearer": True,  # every user must sign the nonce with its own key
        "conn": _NO_LIMIT,
        "leaf": _NO_LIMIT,
    }
    if jetstream:
        limits.update(mem_storage=_NO_LIMIT, disk_storage=_NO_LIMIT, streams=_NO_LIMIT, consumer=_NO_LIMIT)
    claims: dict[str, Any] = {"limits": limits, "type": "account"}
    if deny_by_default:
        claims["default_permissions"] = {"pub": {"deny": [">"]}, "sub": {"deny": [">"]}}
    if revocations:
        claims["revocations"] = dict(sorted(revocations.items()))
    return claims


# --- credentials files ------------------------------------------------------------------------------------

def format_creds(jwt: str, seed: str) -> str:
    """The standard NATS ``.creds`` layout (what ``nsc`` writes and every NATS client reads)."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


def read_creds(path: Path | str) -> tuple[str, str]:
    """``(jwt, seed)`` of a credentials file; :class:`AuthError` if it is not one.

    Checked before nats-py sees the file: given a file without a JWT, nats-py loops forever.
    """
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise AuthError(f"cannot read credentials {path}: {exc}") from exc
    try:
        return parse_creds(text)
    except ValueError as exc:
        raise AuthError(f"{path}: {exc}") from exc


def identity_of(creds_path: Path | str) -> str:
    """The identity (AI id, service id or ``recall-hub``) a credentials file was issued to."""
    jwt, _ = read_creds(creds_path)
    name = decode_jwt(jwt).get("name")
    if not isinstance(name, str) or not name:
        raise AuthError(f"{creds_path}: its JWT names no identity")
    return name


def connect_options(creds_path: Path | str) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect`` that authenticate with ``creds_path``.

    For an AI id or a service, also its private inbox prefix: replies and JetStream acks can only arrive
    there. Warns when the file is readable by others.
    """
    path = Path(creds_path).expanduser()
    jwt, _ = read_creds(path)
    if path.stat().st_mode & 0o077:
        log.warning("credentials %s are readable by group/others; chmod 600 it", path)
    options: dict[str, Any] = {"user_credentials": str(path)}
    name = decode_jwt(jwt).get("name")
    if isinstance(name, str) and (_AI.match(name) or _SERVICE.match(name)):
        options["inbox_prefix"] = inbox_prefix(name).encode()
    return options


# --- generation -------------------------------------------------------------------------------------------


@dataclass
class AuthBundle:
    server_config: Path
    """nats-server config: operator, system account, memory resolver with the account JWTs, JetStream on."""
    hub_creds: Path
    creds: dict[str, Path] = field(default_factory=dict)
    """Credentials file of every AI id and service of the roster."""
    revoked: list[str] = field(default_factory=list)
    """Identities whose previous key this run revoked (rotated or dropped from the roster)."""


def _write(path: Path, text: str, mode: int) -> bool:
    """Atomically write ``text`` with ``mode``; returns False (and touches nothing) when already so."""
    try:
        if path.read_text() == text and (path.stat().st_mode & 0o777) == mode:
            return False
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, mode)  # despite the umask
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _load_key(path: Path, prefix: int) -> Any:
    if path.exists():
        return _key_from_seed(path.read_text())
    kp = _new_key(prefix)
    _write(path, _seed(kp) + "\n", 0o600)
    log.info("created %s", path)
    return kp


def _load_state(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {"issued": {}, "revoked": {}}
    try:
        state = json.loads(path.read_text())
        return {"issued": dict(state.get("issued", {})), "revoked": dict(state.get("revoked", {}))}
    except (OSError, ValueError, AttributeError) as exc:
        raise AuthError(f"cannot read {path}: {exc}") from exc


def _server_config(roster_path: Path, operator_jwt: str, system_pub: str, accounts: dict[str, str]) -> str:
    preload = "\n".join(f'  {pub}: "{jwt}"' for pub, jwt in sorted(accounts.items()))
    return (
        f"# Nexus Recall NATS security, generated by `recall auth init` from {roster_path.name}. Do not edit.\n"
        "# Decentralised JWT auth: the operator and account JWTs below are public (no secrets here). Every\n"
        "# identity connects with its own creds file; its user JWT, signed by the RECALL account key, carries\n"
        "# its publish/subscribe permissions. Use with `nats-server -c` or `include` it in a server config that\n"
        "# has no authorization/accounts block of its own; give the JetStream store with -sd or a jetstream {}.\n"
        f'operator: "{operator_jwt}"\n'
        f'system_account: "{system_pub}"\n'
        "resolver: MEMORY\n"
        f"resolver_preload: {{\n{preload}\n}}\n"
        "jetstream: enabled\n"
    )


def generate(roster_path: Path | str, out_dir: Path | str, rotate: bool = False) -> AuthBundle:
    """Write the server config and every identity's credentials for ``roster_path`` under ``out_dir``.

    Idempotent: a re-run keeps every existing key (and rewrites nothing that did not change). ``rotate``
    gives every identity a new key and revokes the old one. An identity dropped from the roster is revoked
    and its credentials deleted. The operator and account keys are never rotated here (the JetStream data
    of the account is filed under its public key); to start over, delete ``out_dir``. A running server
    picks the new config up on reload (``nats-server --signal reload``) or restart.
    """
    roster_path = Path(roster_path)
    roster = load_roster(roster_path)
    out = _private_dir(Path(out_dir))
    keys = _private_dir(out / KEYS_DIR)
    creds_dir = _private_dir(out / CREDS_DIR)

    operator = _load_key(keys / "operator.nk", nkeys.PREFIX_BYTE_OPERATOR)
    system = _load_key(keys / "system-account.nk", nkeys.PREFIX_BYTE_ACCOUNT)
    account = _load_key(keys / "account.nk", nkeys.PREFIX_BYTE_ACCOUNT)
    state = _load_state(keys / STATE_FILE)
    issued: dict[str, str] = state["issued"]
    revocations: dict[str, int] = {k: int(v) for k, v in state["revoked"].items()}
    now = int(time.time())

    identities: list[tuple[str, dict[str, Any], Path]] = [(HUB_IDENTITY, hub_permissions(), out / HUB_CREDS)]
    identities += [(ai, ai_permissions(ai), creds_dir / f"{ai}.creds") for ai in roster.ai_ids]
    identities += [(svc, service_permissions(svc), creds_dir / f"{svc}.creds") for svc in roster.services]

    bundle = AuthBundle(server_config=out / SERVER_CONFIG, hub_creds=out / HUB_CREDS)
    wanted = {identity for identity, _, _ in identities}
    for identity in sorted(set(issued) - wanted):
        revocations[issued.pop(identity)] = now
        (creds_dir / f"{identity}.creds").unlink(missing_ok=True)
        bundle.revoked.append(identity)
        log.info("revoked %s: no longer in the roster", identity)

    for identity, permissions, path in identities:
        old_jwt: str | None = None
        user = None
        if path.exists() and not rotate:
            old_jwt, seed = read_creds(path)
            user = _key_from_seed(seed)
        if user is None or (identity in issued and issued[identity] != _public(user)):
            user = _new_key(nkeys.PREFIX_BYTE_USER)
            old_jwt = None
        previous = issued.get(identity)
        if previous is not None and previous != _public(user):
            revocations[previous] = now
            bundle.revoked.append(identity)
            log.info("revoked the previous key of %s", identity)
        issued[identity] = _public(user)
        claims = _user_claims(permissions, limited=identity != HUB_IDENTITY)
        jwt = _reuse_or_encode(old_jwt, account, _public(user), identity, claims)
        if _write(path, format_creds(jwt, _seed(user)), 0o600):
            log.info("wrote %s", path)
        if identity != HUB_IDENTITY:
            bundle.creds[identity] = path

    old_config = bundle.server_config.read_text() if bundle.server_config.exists() else ""
    old_jwts = dict(re.findall(r'^\s*(A[A-Z2-7]{55}): "([^"]+)"', old_config, re.MULTILINE))
    old_operator = re.search(r'^operator: "([^"]+)"', old_config, re.MULTILINE)
    account_jwt = _reuse_or_encode(
        old_jwts.get(_public(account)), operator, _public(account), ACCOUNT_NAME,
        _account_claims(jetstream=True, revocations=revocations, deny_by_default=True),
    )
    system_jwt = _reuse_or_encode(
        old_jwts.get(_public(system)), operator, _public(system), SYSTEM_ACCOUNT_NAME,
        _account_claims(jetstream=False, revocations={}, deny_by_default=False),
    )
    operator_jwt = _reuse_or_encode(
        old_operator[1] if old_operator else None, operator, _public(operator), OPERATOR_NAME,
        {"type": "operator", "system_account": _public(system)},
    )
    config = _server_config(
        roster_path, operator_jwt, _public(system), {_public(account): account_jwt, _public(system): system_jwt}
    )
    if _write(bundle.server_config, config, 0o644):
        log.info("wrote %s", bundle.server_config)
    _write(keys / STATE_FILE, json.dumps({"issued": issued, "revoked": revocations}, indent=2, sort_keys=True), 0o600)
    if roster_path.resolve() != (out / ROSTER_COPY).resolve():
        _write(out / ROSTER_COPY, roster_path.read_text(), 0o600)
    return bundle


# --- groups -----------------------------------------------------------------------------------------------


async def bootstrap_groups(roster: Roster | Path | str, nats_url: str, auth_dir: Path | str) -> list[str]:
    """Create the roster's groups through the hub, each as its first ops (with that ops' own credentials).

    Purely additive and idempotent: a group that exists keeps its members and their roles (a handoff may
    have moved the ops role since) and gains the listed ids it lacks; nobody is removed or demoted (that
    is ``remove_member`` / ``transfer_ops``). Returns the ids of the groups it created.
    """
    from recall_client import RecallClient
    from recall_schemas import Conflict, RecallError

    if not isinstance(roster, Roster):
        roster = load_roster(roster)
    creds_dir = Path(auth_dir) / CREDS_DIR
    created: list[str] = []
    for group in roster.groups:
        creator = group.ops[0]
        async with RecallClient(creator, nats_url, creds=str(creds_dir / f"{creator}.creds")) as client:
            try:
                if group.id not in {g.group_id for g in await client.list_groups()}:
                    try:
                        await client.create_group(group.name or group.id, group_id=group.id)
                    except Conflict as exc:
                        raise AuthError(f"group {group.id} exists but {creator} is not in it") from exc
                    created.append(group.id)
                members = {m.ai_id for m in (await client.list_members(group.id)).members}
                wanted = [(ops, "ops") for ops in group.ops[1:]] + [(agent, "agent") for agent in group.agents]
                for ai_id, role in wanted:
                    if ai_id not in members:
                        await client.add_member(group.id, ai_id, role=role)
            except RecallError as exc:
                raise AuthError(f"group {group.id}, as {creator}: {exc.code.value}: {exc}") from exc
    return created
