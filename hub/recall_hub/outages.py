"""A store or NATS restarting is an expected outage: background work logs it as one line and tries
again later, a request answers ``unavailable`` (:func:`as_unavailable`, applied once, where the domain is
entered: :func:`recall_hub.ops.dispatch.dispatch`); anything else is a bug and is logged with its traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions
from recall_schemas import Unavailable

Outage = tuple[type[BaseException], ...]
REDIS_DOWN: Outage = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
"""Redis (or FalkorDB, which speaks its protocol) refusing, dropping or not answering a connection in time."""
STORE_DOWN: Outage = (Unavailable, *REDIS_DOWN, TimeoutError)

_STORE_MODULE = "recall_hub.store."


def store_unavailable(exc: BaseException) -> Unavailable:
    """``exc``, one of :data:`REDIS_DOWN`, as the caller's error: ``unavailable``, naming the store that met
    it: the first store module on its way from the caller (``kv``, ``feed``, ``audit``, …), not a helper
    that store called."""
    store = None
    frame = exc.__traceback__
    while frame is not None and store is None:
        module = frame.tb_frame.f_globals.get("__name__", "")
        if module.startswith(_STORE_MODULE):
            store = module.removeprefix(_STORE_MODULE)
        frame = frame.tb_next
    what = f"{store} store" if store else "a store"
    return Unavailable(f"{what} unreachable: {str(exc) or type(exc).__name__}", {"store": store} if store else None)


@contextmanager
def as_unavailable() -> Iterator[None]:
    """Within the block, a Redis connection error or timeout raised by any store becomes :class:`Unavailable`
    (retry later) instead of reaching the caller as an internal error."""
    try:
        yield
    except REDIS_DOWN as exc:
        raise store_unavailable(exc) from exc


def log_failure(logger: logging.Logger, what: str, exc: BaseException, outages: Outage = STORE_DOWN) -> None:
    """``what`` failed with ``exc``: a warning line for an outage, an error with traceback otherwise."""
    if isinstance(exc, outages):
        logger.warning("%s: %s", what, str(exc) or type(exc).__name__)
    else:
        logger.error("%s", what, exc_info=exc)
