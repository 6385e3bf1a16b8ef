"""A clock that moves only when told, for deterministic tests."""

from __future__ import annotations

import asyncio
import heapq
import itertools

from ._native import _ManualClock

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that moves only when a test moves it.

    Give it to a breaker (``Breaker(clock=clock)``) and everything that
    breaker measures (latencies, windows, backoffs, an emitter's deadlines)
    follows it. A breaker on a manual clock is not on the ticker thread: the
    test closes its windows with ``breaker.tick()``.

    >>> from tailguard import Breaker, ManualClock
    >>> clock = ManualClock()
    >>> b = Breaker(clock=clock, window=1.0)
    >>> clock.advance(0.25)
    >>> clock.now()
    0.25

    ``await clock.sleep(seconds)`` waits until the clock has been advanced
    that far: an emitter's timeouts on a manual clock wait this way, so a
    test decides exactly when a call runs out of time. Tasks woken by
    ``advance`` run at the event loop's next turn (``await
    asyncio.sleep(0)``).
    """

    def __init__(self) -> None:
        self._native = _ManualClock()
        self._sleepers: list = []
        self._seq = itertools.count()

    def now(self) -> float:
        """Seconds since the clock was made (plus every advance, minus every rewind)."""
        return self._native.now()

    def advance(self, seconds: float) -> None:
        """Moves the clock forward, waking the sleepers whose time has
        come. ``ValueError`` for a negative, NaN or infinite ``seconds``,
        or past the clock's range (about 584 years)."""
        self._native.advance(seconds)
        self._wake()

    def rewind(self, seconds: float) -> None:
        """Moves the clock back (a hostile clock: breakers must not misbehave)."""
        self._native.rewind(seconds)

    def set(self, seconds: float) -> None:
        """Sets the clock to ``seconds`` since it was made."""
        self._native.set(seconds)
        self._wake()

    async def sleep(self, seconds: float) -> None:
        """Waits until the clock has been advanced by ``seconds`` from now
        (``ValueError`` for a negative, NaN or infinite ``seconds``)."""
        ns = self._native.to_ns(seconds)
        if ns == 0:
            await asyncio.sleep(0)
            return
        await self._timer_ns(ns)

    def _timer_ns(self, ns: int) -> "asyncio.Future[None]":
        """A future done once the clock has been advanced by ``ns``
        nanoseconds from now: the deadline is fixed here, when it is
        called, in the clock's own unit (so ``sleep(x)`` then
        ``advance(x)`` always wakes it). Cancelled timers are purged once
        they are most of the heap."""
        fut = asyncio.get_running_loop().create_future()
        if ns <= 0:
            fut.set_result(None)
            return fut
        heap = self._sleepers
        heapq.heappush(heap, (self._native.now_ns() + ns, next(self._seq), fut))
        if len(heap) >= 64 and len(heap) > 2 * self._live():
            self._sleepers = [e for e in heap if not e[2].done()]
            heapq.heapify(self._sleepers)
        return fut

    def _live(self) -> int:
        return sum(1 for e in self._sleepers if not e[2].done())

    def _wake(self) -> None:
        now = self._native.now_ns()
        heap = self._sleepers
        while heap and heap[0][0] <= now:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.get_loop().call_soon_threadsafe(_wake_one, fut)

    def __repr__(self) -> str:
        return f"<tailguard.ManualClock at {self.now():.6f} s>"


def _wake_one(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)
