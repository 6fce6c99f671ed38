"""A store or NATS restarting is an expected outage: background work logs it as one line and tries
again later; anything else is a bug and is logged with its traceback."""

from __future__ import annotations

import logging

import redis.exceptions
from recall_schemas import Unavailable

Outage = tuple[type[BaseException], ...]
STORE_DOWN: Outage = (Unavailable, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, TimeoutError)


def log_failure(logger: logging.Logger, what: str, exc: BaseException, outages: Outage = STORE_DOWN) -> None:
    """``what`` failed with ``exc``: a warning line for an outage, an error with traceback otherwise."""
    if isinstance(exc, outages):
        logger.warning("%s: %s", what, str(exc) or type(exc).__name__)
    else:
        logger.error("%s", what, exc_info=exc)
