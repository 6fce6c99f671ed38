"""The NATS micro service protocol (``$SRV`` discovery and statistics), owned rather than borrowed.

``nats.micro`` times an endpoint's handler, which in the hub hands a request to a task in microseconds and
never fails, and its endpoints subscribe with nats-py's default pending limits; bending it to the hub meant
writing its private fields. The protocol itself is small: a service answers ``$SRV.PING``, ``$SRV.INFO`` and
``$SRV.STATS`` (each also ``.<name>`` and ``.<name>.<id>``) with JSON of the ``io.nats.micro.v1`` schemas,
and an error reply carries the ``Nats-Service-Error`` and ``Nats-Service-Error-Code`` headers. So here it is,
on nats-py's public client API only: what ``nats micro ls/info/stats`` and other NATS tooling read.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

PREFIX = "$SRV"
VERBS = ("PING", "INFO", "STATS")
ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"
LAST_ERROR_CHARS = 500

MessageHandler = Callable[[Msg], Awaitable[None]]


@dataclass
class Endpoint:
    """One endpoint: where it listens and what it has answered. The owner calls :meth:`record` when a request
    is answered (not when it is handed on), so the statistics are the real processing time and errors."""

    name: str
    subject: str
    queue_group: str
    num_requests: int = 0
    num_errors: int = 0
    processing_time: int = 0
    """Nanoseconds, summed over the requests answered."""
    last_error: str = ""
    nc: NATS | None = field(default=None, repr=False)
    """The connection it listens and answers on."""
    subscription: Subscription | None = field(default=None, repr=False)

    def record(self, elapsed_ns: int, error: str | None = None) -> None:
        self.num_requests += 1
        self.processing_time += elapsed_ns
        if error is not None:
            self.num_errors += 1
            self.last_error = error[:LAST_ERROR_CHARS]

    async def listen(self, nc: NATS, handler: MessageHandler, pending_msgs: int, pending_bytes: int) -> None:
        assert self.subscription is None, "already listening"
        self.nc = nc
        self.subscription = await nc.subscribe(
            self.subject,
            queue=self.queue_group,
            cb=handler,
            pending_msgs_limit=pending_msgs,
            pending_bytes_limit=pending_bytes,
        )

    async def stop(self) -> None:
        if self.subscription is not None:
            subscription, self.subscription = self.subscription, None
            await subscription.unsubscribe()

    async def respond(self, msg: Msg, body: bytes, headers: dict[str, str] | None = None) -> None:
        """Answer ``msg`` (nothing if nobody waits for an answer)."""
        if msg.reply and self.nc is not None:
            await self.nc.publish(msg.reply, body, headers=headers)

    async def respond_error(self, msg: Msg, code: str, description: str, body: bytes) -> None:
        """An error reply as NATS services give one: status code and description in headers, details in ``body``."""
        await self.respond(msg, body, {ERROR_HEADER: description, ERROR_CODE_HEADER: code})

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "queue_group": self.queue_group, "metadata": {}}

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "subject": self.subject,
            "queue_group": self.queue_group,
            "num_requests": self.num_requests,
            "num_errors": self.num_errors,
            "last_error": self.last_error,
            "processing_time": self.processing_time,
            "average_processing_time": self.processing_time // self.num_requests if self.num_requests else 0,
            "data": None,
        }


class Service:
    """One service instance: a name shared by every hub process, an id of its own, and its endpoints."""

    def __init__(self, nc: NATS, name: str, version: str, description: str) -> None:
        self.nc = nc
        self.name = name
        self.version = version
        self.description = description
        self.id = uuid.uuid4().hex[:22].upper()
        self.started = datetime.now(UTC)
        self.endpoints: list[Endpoint] = []
        self._control: list[Subscription] = []

    def subjects(self, verb: str) -> list[str]:
        """Where a ``verb`` reaches this instance: every service, this kind, this instance."""
        return [f"{PREFIX}.{verb}", f"{PREFIX}.{verb}.{self.name}", f"{PREFIX}.{verb}.{self.name}.{self.id}"]

    async def start(self) -> None:
        answers = {"PING": self.ping, "INFO": self.info, "STATS": self.stats}
        for verb in VERBS:
            answer = answers[verb]
            for subject in self.subjects(verb):
                self._control.append(await self.nc.subscribe(subject, cb=self._answering(answer)))
        self.started = datetime.now(UTC)
        await self.nc.flush()

    def _answering(self, answer: Callable[[], dict[str, Any]]) -> MessageHandler:
        async def on_control(msg: Msg) -> None:
            if msg.reply:
                await self.nc.publish(msg.reply, json.dumps(answer()).encode())

        return on_control

    async def stop(self) -> None:
        for endpoint in self.endpoints:
            await endpoint.stop()
        control, self._control = self._control, []
        for subscription in control:
            await subscription.unsubscribe()

    def _identity(self, kind: str) -> dict[str, Any]:
        return {
            "type": f"io.nats.micro.v1.{kind}_response", "name": self.name, "id": self.id, "version": self.version,
            "metadata": {},
        }

    def ping(self) -> dict[str, Any]:
        return self._identity("ping")

    def info(self) -> dict[str, Any]:
        return {
            **self._identity("info"), "description": self.description,
            "endpoints": [endpoint.info() for endpoint in self.endpoints],
        }

    def stats(self) -> dict[str, Any]:
        started = self.started.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return {**self._identity("stats"), "started": started, "endpoints": [e.stats() for e in self.endpoints]}
