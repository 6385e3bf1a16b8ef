"""The seed's scenario in asyncio, on the manual clock: a router fans each
trigger out to three consumers, one of them slows past its latency
threshold. Its breaker trips; the other two keep delivering, their emits as
fast as before; every trigger is delivered, queued or handed back, and
accounted for."""

from __future__ import annotations

import asyncio

import pytest

from tailguard import Breaker, Delivered, Diverted, HandedBack, Priority, State

from conftest import settle

NAMES = ("pricing", "search", "audit")
SLOW = "audit"
PER_WINDOW = 10
CLASSES = (Priority.CRITICAL, Priority.ROUTINE, Priority.IDLE)


async def test_one_slow_consumer_trips_alone_and_nothing_is_lost(clock, make_emitter):
    breakers = {
        n: Breaker(clock=clock, name=n, latency_threshold=0.1, trip_windows=2, min_calls=5,
                   window=1.0, base_backoff=30.0, max_backoff=30.0)
        for n in NAMES
    }
    emitters = {n: make_emitter(breakers[n], capacity=16, bulkhead=PER_WINDOW, timeout=0.25) for n in NAMES}
    slowed = False
    called = {n: [] for n in NAMES}

    def consumer(name):
        async def call(trigger):
            called[name].append(trigger)
            if name == SLOW and slowed:
                await clock.sleep(0.2)  # past its 0.1 s threshold, within the 0.25 s timeout
            else:
                await asyncio.sleep(0)
            return trigger

        return call

    calls = {n: consumer(n) for n in NAMES}
    outcomes = {n: [] for n in NAMES}
    latency = {n: [] for n in NAMES}  # emit latency on the clock, per window

    async def emit(name, trigger, priority):
        t0 = clock.now()
        out = await emitters[name].emit(trigger, calls[name], priority)
        latency[name][-1].append(clock.now() - t0)
        outcomes[name].append((trigger, priority, out))

    async def window(w):
        for n in NAMES:
            latency[n].append([])
        tasks = {n: [] for n in NAMES}
        for i in range(PER_WINDOW):
            trigger = f"w{w}-{i}"
            for n in NAMES:
                tasks[n].append(asyncio.create_task(emit(n, trigger, CLASSES[i % 3])))
        await settle()
        # Before the clock moves at all: the healthy consumers are done.
        for n in NAMES:
            if n != SLOW:
                assert all(t.done() for t in tasks[n]), f"{n} waited on {SLOW} in window {w}"
        clock.advance(0.2)
        await settle()
        assert all(t.done() for ts in tasks.values() for t in ts)
        clock.advance(0.8)
        for b in breakers.values():
            b.tick()

    # Two healthy windows, then the audit consumer slows down.
    for w in range(2):
        await window(w)
    assert all(b.state == State.CLOSED for b in breakers.values())
    slowed = True
    for w in range(2, 4):
        await window(w)
    assert breakers[SLOW].state == State.OPEN
    assert breakers[SLOW].snapshot().trip_count == 1
    audit_calls_at_trip = len(called[SLOW])
    for w in range(4, 7):
        await window(w)

    # The slow one: tripped, and no longer called nor waited for.
    assert len(called[SLOW]) == audit_calls_at_trip == 4 * PER_WINDOW
    assert all(lat == 0.0 for w in latency[SLOW][4:] for lat in w)
    assert [max(w) for w in latency[SLOW][2:4]] == pytest.approx([0.2, 0.2])
    s = emitters[SLOW].stats()
    assert (s.delivered, s.diverted_bulkhead) == (4 * PER_WINDOW, 0)
    assert s.emit_time_sum == pytest.approx(0.2 * 2 * PER_WINDOW)
    assert s.diverted_open == 3 * PER_WINDOW - s.handed_back_full

    # The others: closed, everything delivered, every emit as fast as before.
    for n in NAMES:
        if n == SLOW:
            continue
        assert breakers[n].state == State.CLOSED
        assert breakers[n].snapshot().totals.calls == 7 * PER_WINDOW
        assert [o for _, _, o in outcomes[n]] == [Delivered(t) for t, _, _ in outcomes[n]]
        assert [max(w) for w in latency[n]] == [0.0] * 7
        st = emitters[n].stats()
        assert (st.delivered, st.emit_count, st.emit_time_sum) == (7 * PER_WINDOW, 7 * PER_WINDOW, 0.0)

    # Nothing lost: every trigger of every consumer is delivered, in the
    # queue, or back with the caller (handed back, or displaced), once.
    for n in NAMES:
        everything = [t for t, _, _ in outcomes[n]]
        assert len(everything) == len(set(everything)) == 7 * PER_WINDOW
        delivered = [o.value for _, _, o in outcomes[n] if isinstance(o, Delivered)]
        handed_back = [o.trigger for _, _, o in outcomes[n] if isinstance(o, HandedBack)]
        displaced = [o.displaced[0] for _, _, o in outcomes[n] if isinstance(o, Diverted) and o.displaced]
        queued = [t for t, _ in emitters[n].shutdown()]
        kept = delivered + handed_back + displaced + queued
        assert sorted(kept) == sorted(everything), n
        if n == SLOW:
            assert len(queued) == 16 and handed_back and displaced
            # What stayed queued is the highest class: the queue kept the critical triggers.
            priority_of = {t: p for t, p, _ in outcomes[n]}
            assert [priority_of[t] for t in queued] == sorted((priority_of[t] for t in queued), reverse=True)
            assert priority_of[queued[0]] == Priority.CRITICAL
