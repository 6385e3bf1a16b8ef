"""Replay from asyncio (``Emitter.replay``): class order and the head kept
on failure, attempts and hand-back, the breaker's and the bulkhead's
refusals, one replay at a time, cancellation, timeouts on the manual clock,
and shutdown racing a replay."""

import asyncio

import pytest

from tailguard import Breaker, Divert, Emitter, ManualClock, Priority


def backlog(n=9, attempts=2, bulkhead=None):
    clock = ManualClock()
    b = Breaker(clock=clock, half_open_probes=1, success_to_close=1)
    e = Emitter(b, capacity=64, bulkhead=bulkhead, timeout=0.2, replay_attempts=attempts)
    b.trip_now()
    for i in range(n):
        out = e.emit_blocking(i, lambda t: t, Priority(i % 3))
        assert out.reason.kind == "open"
    b.reset()
    return clock, b, e


def conserved(e, emitted):
    s = e.stats()
    assert s.emitted == emitted, s
    assert s.into_queue == s.out_of_queue, s


async def test_replay_goes_highest_class_first_and_keeps_a_failing_trigger_at_the_head():
    clock, b, e = backlog()
    seen = []

    async def send(t):
        seen.append(t)
        if t == 5:
            raise ConnectionError("still down")
        return t

    r = await e.replay(send, max=1)
    assert (r.delivered, r.stopped, r.handed_back) == (1, "max", None)
    r = await e.replay(send)
    assert r.delivered == 0
    assert isinstance(r.stopped, Divert) and r.stopped.kind == "failed"
    assert isinstance(r.stopped.error, ConnectionError)
    assert e.stats().pending
    # Its second failure is its last attempt: handed back.
    r = await e.replay(send)
    assert r.handed_back == (5, Priority.CRITICAL)
    r = await e.replay(send)
    assert (r.delivered, r.stopped) == (7, "empty")
    # Critical (2, 5, 8), then routine (1, 4, 7), then idle (0, 3, 6); 5
    # tried twice and never overtaken by 8.
    assert seen == [2, 5, 5, 8, 1, 4, 7, 0, 3, 6]
    s = e.stats()
    assert (s.replayed, s.replay_handed_back, s.queued, s.pending) == (8, 1, 0, False)
    conserved(e, 9)


async def test_a_replay_does_not_run_while_the_breaker_is_open_or_another_replay_runs():
    clock, b, e = backlog(n=2)
    b.trip_now()

    async def send(t):
        raise AssertionError("not called while open")

    assert (await e.replay(send)).stopped == "not_closed"
    b.reset()
    gate = asyncio.Event()

    async def slow(t):
        await gate.wait()
        return t

    first = asyncio.create_task(e.replay(slow))
    await asyncio.sleep(0)
    assert (await e.replay(slow)).stopped == "busy"
    gate.set()
    assert (await first).delivered == 2
    conserved(e, 2)


async def test_turned_away_by_the_bulkhead_the_trigger_stays_at_the_head_with_no_attempt_used():
    clock, b, e = backlog(n=1, attempts=1, bulkhead=1)
    gate = asyncio.Event()

    async def hold(t):
        await gate.wait()

    holder = asyncio.create_task(e.emit("holder", hold))
    await asyncio.sleep(0)
    for _ in range(3):
        r = await e.replay(lambda t: asyncio.sleep(0))
        assert r.stopped.kind == "bulkhead_full" and r.handed_back is None
    gate.set()
    await holder

    async def ok(t):
        return t

    assert (await e.replay(ok)).delivered == 1
    conserved(e, 2)


async def test_a_cancelled_replay_keeps_its_trigger_at_the_head_and_gives_its_slots_back():
    clock, b, e = backlog(n=1, attempts=1, bulkhead=1)

    async def forever(t):
        await asyncio.Event().wait()

    task = asyncio.create_task(e.replay(forever))
    await asyncio.sleep(0)
    assert e.stats().bulkhead_in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    s = e.stats()
    assert (s.bulkhead_in_flight, s.pending, s.replay_handed_back) == (0, True, 0)
    # No attempt was used: its one attempt is still there.
    async def ok(t):
        return t

    assert (await e.replay(ok)).delivered == 1
    conserved(e, 1)


async def test_a_replayed_call_is_cut_at_its_deadline_on_the_manual_clock():
    clock, b, e = backlog(n=1, attempts=1)

    async def slow(t):
        await clock.sleep(10)

    task = asyncio.create_task(e.replay(slow))
    for _ in range(3):
        await asyncio.sleep(0)
    clock.advance(0.2)
    r = await task
    assert r.stopped.kind == "timed_out" and r.stopped.elapsed == pytest.approx(0.2)
    assert r.handed_back == (0, Priority.IDLE)
    conserved(e, 1)


async def test_shutdown_while_a_replayed_call_is_out_hands_its_trigger_back_when_it_fails():
    clock, b, e = backlog(n=3)
    gate = asyncio.Event()

    async def fails_later(t):
        await gate.wait()
        raise ConnectionError("down")

    task = asyncio.create_task(e.replay(fails_later))
    await asyncio.sleep(0)
    left = e.shutdown()
    assert [p for _, p in left] == [Priority.ROUTINE, Priority.IDLE]
    gate.set()
    r = await task
    assert r.handed_back == (2, Priority.CRITICAL)
    s = e.stats()
    assert (s.queued, s.pending, s.drained) == (0, False, 2)
    conserved(e, 3)
