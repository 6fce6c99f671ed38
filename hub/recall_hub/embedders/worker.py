"""The one thread an in-process model runs on: the event loop never blocks on inference, and concurrent
calls queue instead of oversubscribing the CPU (the model has its own intra-op threads)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from recall_hub.embedders.base import EmbedderError, check_texts

T = TypeVar("T")
log = logging.getLogger(__name__)


class ModelThread:
    def __init__(self, name: str, nice: int = 0) -> None:
        """``name``: the embedder's, for errors and the thread's name. ``nice``: how much lower than the
        process's the thread's CPU priority is (Linux only)."""
        self.name = name
        self.nice = nice
        self.native_id: int | None = None
        """The OS thread's id once started."""
        self.lock = threading.Lock()
        """Held to start or stop the thread; embedders also load their model under it."""
        self.closed = False
        self._executor: ThreadPoolExecutor | None = None

    async def run(self, work: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._started(), work, *args)

    async def vectors(
        self, texts: Sequence[str], dim: int, work: Callable[..., np.ndarray], *args: object
    ) -> np.ndarray:
        """``work(texts, *args)`` on this thread, the texts checked first; no texts, no call."""
        items = check_texts(texts)
        self.check_open()
        if not items:
            return np.zeros((0, dim), dtype=np.float32)
        return await self.run(work, items, *args)

    async def aclose(self) -> None:
        """:meth:`close` off the event loop, which keeps running while a batch in flight finishes."""
        await asyncio.to_thread(self.close)

    def check_open(self) -> None:
        if self.closed:
            raise EmbedderError(f"the {self.name} embedder is closed")

    def close(self) -> None:
        """Stop the thread, after the call in flight (blocks: call it off the event loop)."""
        with self.lock:
            self.closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def _started(self) -> ThreadPoolExecutor:
        with self.lock:
            self.check_open()
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"recall-{self.name}", initializer=self._started_on_thread
                )
            return self._executor

    def _started_on_thread(self) -> None:
        self.native_id = threading.get_native_id()
        if self.nice <= 0 or not sys.platform.startswith("linux"):
            return
        try:  # on Linux a thread has a nice value of its own, set through its thread id
            os.setpriority(os.PRIO_PROCESS, self.native_id, os.getpriority(os.PRIO_PROCESS, self.native_id) + self.nice)
        except OSError as exc:
            log.warning("could not lower the %s thread's priority: %s", self.name, exc)
