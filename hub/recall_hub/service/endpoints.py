"""The NATS edge of the hub: subjects, payload decoding, error replies. No domain logic here.

Each operation is an endpoint of one NATS micro service (discovery and stats via ``$SRV``) on
``recall.v1.req.*.<op>`` in the ``recall-hub`` queue group, so hub processes share the load. The
caller is the subject's fourth token; NATS permissions make that token unforgeable.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import Any

from nats.aio.client import Client as NATS
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, Service, ServiceConfig
from pydantic import ValidationError
from recall_schemas import (
    OPERATIONS,
    ErrorReply,
    InternalError,
    InvalidRequest,
    PayloadTooLarge,
    RecallError,
)
from recall_schemas.ids import AI_ID_PATTERN
from recall_schemas.subjects import HUB_QUEUE_GROUP, SERVICE_NAME, caller_of, endpoint_subject, inbox_prefix

from recall_hub.context import HubContext
from recall_hub.ops.dispatch import dispatch
from recall_hub.store.audit import bead_ids_of

log = logging.getLogger(__name__)

_AI_ID = re.compile(AI_ID_PATTERN)
ERROR_STATUS = {
    "invalid": "400",
    "not_found": "404",
    "forbidden": "403",
    "conflict": "409",
    "too_large": "413",
    "unavailable": "503",
    "timeout": "504",
    "internal": "500",
}


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


async def handle(ctx: HubContext, op: str, subject: str, payload: bytes) -> bytes:
    """Decode, authorise by subject, run, encode. Raises only :class:`RecallError`."""
    try:
        caller = caller_of(subject)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    if not _AI_ID.fullmatch(caller):
        raise InvalidRequest(f"caller id {caller!r} in the subject is not an AI id")
    if len(payload) > ctx.settings.max_payload_bytes:
        raise PayloadTooLarge(
            f"payload of {len(payload)} bytes exceeds the limit of {ctx.settings.max_payload_bytes}"
        )
    operation = OPERATIONS[op]
    request = None
    try:
        try:
            request = operation.request.model_validate_json(payload or b"{}")
        except ValidationError as exc:
            raise InvalidRequest(_validation_message(exc), {"op": op}) from exc
        try:
            reply = await dispatch(ctx, caller, op, request)
        except ValidationError as exc:  # a model a handler builds from the request (e.g. promote_to_bead)
            raise InvalidRequest(_validation_message(exc), {"op": op}) from exc
    except RecallError as exc:
        await ctx.audit.record(caller, op, False, exc.code.value, bead_ids_of(request))
        raise
    await ctx.audit.record(caller, op, True, "ok", bead_ids_of(request, reply))
    return reply.model_dump_json().encode()


def reply_inbox_ok(subject: str, reply: str | None) -> bool:
    """Whether ``reply`` lies in the private inbox of the subject's caller (``_INBOX.<caller>.…``).

    The hub's response permission lets it answer whatever reply subject a request names; checking it
    here means the hub can never be used to put a message into another identity's inbox.
    """
    try:
        caller = caller_of(subject)
    except ValueError:
        return False
    return bool(reply) and str(reply).startswith(f"{inbox_prefix(caller)}.")


class HubService:
    """Runs the endpoints of one hub process on a NATS connection."""

    def __init__(self, ctx: HubContext, nc: NATS, version: str = "0.1.0") -> None:
        self.ctx = ctx
        self.nc = nc
        self.version = version
        self._service: Service | None = None
        self._slots = asyncio.Semaphore(ctx.settings.max_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        settings = ctx.settings
        self._private_inboxes = bool(settings.auth_required or settings.nats_creds or settings.nats_user)
        """Under NATS auth, answer only into the caller's own inbox (see :func:`reply_inbox_ok`)."""
        self.repaired: asyncio.Task[int] | None = None
        self.events: Any = None
        """The process's EventConsumer, once running."""

    async def start(self) -> None:
        self.ctx.feed.notifier = self.nc.publish
        self._service = await add_service(
            self.nc,
            ServiceConfig(
                name=SERVICE_NAME,
                version=self.version,
                description="Nexus Recall memory hub",
                queue_group=HUB_QUEUE_GROUP,
            ),
        )
        for op in OPERATIONS:
            await self._service.add_endpoint(
                EndpointConfig(name=op, subject=endpoint_subject(op), handler=self._endpoint(op))
            )
        log.info("hub serving %d operations on %s", len(OPERATIONS), endpoint_subject("<op>"))

    def _endpoint(self, op: str):  # type: ignore[no-untyped-def]
        async def on_request(request: Request) -> None:
            if self._private_inboxes and not reply_inbox_ok(request.subject, request._msg.reply):
                log.warning("dropped %s on %s: reply subject %r is not the caller's inbox", op, request.subject,
                            request._msg.reply)
                return
            # NATS runs one subscription's callbacks one at a time; hand each request to its own task
            # so a slow query never holds up the next request.
            await self._slots.acquire()
            task = asyncio.create_task(self._serve(op, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return on_request

    async def _serve(self, op: str, request: Request) -> None:
        try:
            try:
                body = await handle(self.ctx, op, request.subject, request.data)
            except RecallError as exc:
                await _respond_error(request, exc)
                return
            except Exception:
                ref = uuid.uuid4().hex[:12]
                log.exception("internal error %s in %s", ref, op)
                await _respond_error(request, InternalError(f"internal error (ref {ref})", {"ref": ref}))
                return
            await request.respond(body)
        except Exception:
            log.exception("could not reply to %s", op)
        finally:
            self._slots.release()

    async def stop(self) -> None:
        if self._service is not None:
            await self._service.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _respond_error(request: Request, exc: RecallError) -> None:
    reply: ErrorReply = exc.to_reply()
    await request.respond_error(
        ERROR_STATUS[exc.code.value], exc.code.value, reply.model_dump_json().encode()
    )
