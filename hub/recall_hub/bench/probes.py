"""Instruments of one timed request: the bytes it sent and got back (:class:`SizeTap`), the time the
in-process hub spent in FalkorDB, the embedder and the vector sets (:class:`HubProbe`), and the pauses of
Python's garbage collector (:class:`GcWatch`).
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg


class SizeTap:
    """Wraps a connection's ``request`` to record the byte size of the last request and reply."""

    def __init__(self, nc: NATS) -> None:
        self.last_request = 0
        self.last_reply = 0
        original = nc.request

        async def request(
            subject: str,
            payload: bytes = b"",
            timeout: float = 0.5,  # noqa: ASYNC109 - mirrors NATS.request
            old_style: bool = False,
            headers: dict[str, Any] | None = None,
        ) -> Msg:
            self.last_request = len(payload)
            msg = await original(subject, payload, timeout=timeout, old_style=old_style, headers=headers)
            self.last_reply = len(msg.data)
            return msg

        nc.request = request  # type: ignore[method-assign]


PROBE_BUCKETS = {
    "graph": "FalkorDB calls: round trip + result parsing in the hub",
    "graph_rt": "FalkorDB round trips alone (the redis command)",
    "falkordb": "FalkorDB's own reported execution time",
    "embed": "the embedder (thread hand-off included)",
    "vectors": "Redis vector-set calls (VADD, VSIM, ...)",
}
"""Where :class:`HubProbe` puts the hub's time, and what each bucket holds."""


def _falkordb_exec_ms(reply: Any) -> float:
    """FalkorDB's reported execution time, from a ``GRAPH.QUERY`` reply as the server sends it (its last
    element is the statistics: ``"Query internal execution time: 0.15 milliseconds"``, bytes or text)."""
    stats = reply[-1] if isinstance(reply, list) and reply else []
    for stat in stats if isinstance(stats, list) else []:
        text = stat.decode() if isinstance(stat, bytes) else str(stat)
        if "internal execution time" in text:
            with contextlib.suppress(ValueError, IndexError):
                return float(text.split(": ")[1].split(" ")[0])
    return 0.0


_MISSING = object()


class HubProbe:
    """Per request, the time the in-process hub spends in FalkorDB, the embedder and the vector sets.

    Instance attributes shadow the methods of the hub's store objects; the hub's code is unchanged
    and :meth:`detach` restores it. Only meaningful with one request in flight.
    """

    def __init__(self) -> None:
        self.ns: dict[str, float] = dict.fromkeys(PROBE_BUCKETS, 0.0)
        self.queries = 0
        self._wrapped: list[tuple[Any, str, Any]] = []

    def wrap(self, obj: Any, name: str, bucket: str, count: bool = False, executes: bool = False) -> None:
        """Time ``obj.name`` into ``bucket``; ``count``: each call is a query; ``executes``: it is the redis
        command, whose reply says how long FalkorDB itself took."""
        original = getattr(obj, name, None)
        if original is None or not callable(original):
            return

        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            result = await original(*args, **kwargs)
            self.ns[bucket] += time.perf_counter_ns() - t0
            if count:
                self.queries += 1
            if executes:
                self.ns["falkordb"] += _falkordb_exec_ms(result) * 1e6
            return result

        own = vars(obj).get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING
        setattr(obj, name, timed)
        self._wrapped.append((obj, name, own))

    @classmethod
    def attach(cls, ctx: Any) -> HubProbe:
        probe = cls()
        store = getattr(ctx, "graph", None)
        graph = getattr(store, "graph", None)
        if graph is not None:
            for name in ("query", "ro_query"):
                probe.wrap(graph, name, "graph", count=True)
            probe.wrap(store, "values", "graph", count=True)
            probe.wrap(graph, "execute_command", "graph_rt", executes=True)
        embedder = getattr(ctx, "embedder", None)
        if embedder is not None:
            probe.wrap(embedder, "embed", "embed")
        vectors = getattr(ctx, "vectors", None)
        if vectors is not None:
            for name in ("add", "search", "remove", "set_attributes", "vector"):
                probe.wrap(vectors, name, "vectors")
        return probe

    def reset(self) -> None:
        self.ns = dict.fromkeys(PROBE_BUCKETS, 0.0)
        self.queries = 0

    def detach(self) -> None:
        """Put back what was wrapped: an attribute the object held itself (the FalkorDB client binds
        ``execute_command`` per instance) is restored, a method of its class shows through again."""
        for obj, name, own in reversed(self._wrapped):
            if own is _MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(obj, name)
            else:
                setattr(obj, name, own)
        self._wrapped.clear()


class GcWatch:
    """Records the Python garbage collector's pauses (client and in-process hub share them)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._t0 = 0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
        else:
            self.pauses.append((info.get("generation", -1), (time.perf_counter_ns() - self._t0) / 1e6))

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)
