"""The sidecar's one connection to the hub: a :class:`RecallClient` for the agent's AI id, opened on
first use and reopened after a failure, so a sidecar started before NATS (or a hub) comes up, or one
that outlives an outage, serves again as soon as they are back. It holds no memory of its own."""

from __future__ import annotations

import asyncio
import logging
from typing import TypeVar

from pydantic import BaseModel
from recall_schemas import Unavailable

from recall_client.client import RecallClient

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class HubLink:
    """Where and as whom the sidecar talks to the hub.

    ``timeout``/``retries`` are the client's per-request settings; ``connect_timeout`` bounds the
    first connection to NATS (the client itself would keep retrying forever while NATS is down).
    """

    def __init__(
        self,
        ai_id: str,
        nats_url: str = "nats://127.0.0.1:4222",
        *,
        creds: str | None = None,
        user: str | None = None,
        password: str | None = None,
        timeout: float = 5.0,
        retries: int = 2,
        connect_timeout: float = 3.0,
    ) -> None:
        self.ai_id = ai_id
        self.nats_url = nats_url
        self.connect_timeout = connect_timeout
        self._options = {"creds": creds, "user": user, "password": password}
        self._timeout = timeout
        self._retries = retries
        self._client: RecallClient | None = None
        self._lock = asyncio.Lock()
        # Fails at once, before any transport starts, if ai_id is not an AI id.
        RecallClient(ai_id, nats_url, timeout=timeout, retries=retries)

    async def client(self) -> RecallClient:
        """The connected client; connects (again) if there is none. Raises :class:`Unavailable`."""
        client = self._client
        if client is not None:
            nc = client.nc
            if nc.is_connected:
                return client
            if not nc.is_closed:
                # nats-py is reconnecting on its own; a request now would only wait out its timeout.
                raise Unavailable(f"lost the connection to NATS at {self.nats_url}; reconnecting in the background")
        async with self._lock:
            if self._client is not None and self._client.nc.is_connected:
                return self._client
            await self._drop()
            fresh = RecallClient(
                self.ai_id,
                self.nats_url,
                creds=self._options["creds"],
                user=self._options["user"],
                password=self._options["password"],
                timeout=self._timeout,
                retries=self._retries,
            )
            try:
                await asyncio.wait_for(fresh.connect(), self.connect_timeout)
            except TimeoutError:
                raise Unavailable(
                    f"cannot connect to NATS at {self.nats_url} within {self.connect_timeout}s "
                    "(is it running, and are the credentials right?)"
                ) from None
            log.info("connected to %s as %s", self.nats_url, self.ai_id)
            self._client = fresh
            return fresh

    async def call(self, op: str, request: BaseModel, reply_type: type[M]) -> M:
        """One hub operation as this agent; hub errors arrive as their typed :class:`RecallError`."""
        client = await self.client()
        return await client.call(op, request, reply_type)

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.close()
            except Exception as exc:  # a dead connection may refuse to drain; it is gone either way
                log.debug("closing the old connection: %s", exc)

    async def close(self) -> None:
        async with self._lock:
            await self._drop()
