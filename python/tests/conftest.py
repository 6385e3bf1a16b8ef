"""Shared fixtures: a manual clock, a helper that lets the event loop run
the tasks it has woken, and emitters whose two accounting identities are
checked after every test that made them."""

from __future__ import annotations

import asyncio
import sys

import pytest

import tailguard
from tailguard import Breaker, Emitter, ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def settle(turns: int = 50) -> None:
    """Lets the event loop run every task that is ready (woken by a clock
    advance, or just created) until nothing more moves. No time passes on
    the manual clock."""
    for _ in range(turns):
        await asyncio.sleep(0)


def close_window(breaker: Breaker, clock: ManualClock) -> None:
    """Moves the clock to the breaker's next window end and closes it."""
    clock.advance(breaker.next_due())
    breaker.tick()


class Tracked:
    """An emitter that counts the emits made through it (an emit counts
    once its coroutine starts: that is when the emitter sees it)."""

    def __init__(self, emitter: Emitter) -> None:
        self.emitter = emitter
        self.emits = 0

    async def emit(self, trigger, call, priority=tailguard.Priority.ROUTINE):
        self.emits += 1
        return await self.emitter.emit(trigger, call, priority)

    def emit_blocking(self, trigger, call, priority=tailguard.Priority.ROUTINE):
        self.emits += 1
        return self.emitter.emit_blocking(trigger, call, priority)

    def __getattr__(self, name):
        return getattr(self.emitter, name)

    def __len__(self) -> int:
        return len(self.emitter)


def check_identities(t: Tracked) -> None:
    s = t.emitter.stats()
    assert s.emitted == t.emits, f"emitted {s.emitted} != {t.emits} emits: {s}"
    assert s.into_queue == s.out_of_queue, f"into_queue {s.into_queue} != out_of_queue {s.out_of_queue}: {s}"
    assert s.queued == len(t.emitter)
    assert s.bulkhead_in_flight == 0, s


@pytest.fixture
def make_emitter():
    """``make_emitter(breaker, **kw)``: a tracked emitter; after the test,
    ``stats().emitted`` equals the emits made and ``into_queue`` equals
    ``out_of_queue``, with no bulkhead slot still held."""
    made: list[Tracked] = []

    def make(breaker: Breaker, **kw) -> Tracked:
        t = Tracked(Emitter(breaker, **kw))
        made.append(t)
        return t

    yield make
    for t in made:
        check_identities(t)


@pytest.fixture
def unraisable(monkeypatch):
    """Collects what is reported to ``sys.unraisablehook`` (a listener's
    exception) instead of printing it."""
    seen: list = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))
    return seen
