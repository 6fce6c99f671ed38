"""Closing a NATS connection for certain."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client as NATS
from recall_schemas.tasks import stop_tasks


async def close_nats(nc: NATS, within: float = 10.0) -> None:
    """Drain ``nc`` (or close it when it is not connected: nats-py refuses to drain a reconnecting connection),
    then make sure its reconnect loop has ended: nats-py cancels it once, and a loop that lost that cancellation
    retries a server that is gone forever."""
    try:
        if nc.is_connected:
            await nc.drain()
    finally:
        if not nc.is_closed:
            await nc.close()
        reconnecting = getattr(nc, "_reconnection_task", None)  # nats-py's; absent in another version
        if isinstance(reconnecting, asyncio.Future):
            await stop_tasks([reconnecting], within)
