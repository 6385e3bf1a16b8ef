"""The emitter's outcomes, queue, cancellation and shutdown, on the manual
clock. Every emitter is made by ``make_emitter``: after each test its
``stats().emitted`` equals the emits made and ``into_queue`` equals
``out_of_queue`` (conftest.py)."""

from __future__ import annotations

import asyncio

import pytest

from tailguard import (Breaker, Delivered, Divert, Diverted, EmitterShutDown, HandedBack, Priority,
                       QueueFull, State)

from conftest import close_window, settle

IDLE, ROUTINE, CRITICAL = Priority.IDLE, Priority.ROUTINE, Priority.CRITICAL


async def ok(x):
    return f"sent {x}"


async def bad(x):
    raise ConnectionError(f"refused {x}")


class Gate:
    """A consumer whose calls wait until ``open()``; counts its calls."""

    def __init__(self):
        self.event = asyncio.Event()
        self.calls = []

    async def __call__(self, x):
        self.calls.append(x)
        await self.event.wait()
        return f"late {x}"

    def open(self):
        self.event.set()


# ----------------------------------------------------------------------
# Outcomes.


async def test_delivered(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock))
    out = await e.emit("a", ok, CRITICAL)
    assert out == Delivered("sent a") and out.delivered
    s = e.stats()
    assert (s.delivered, s.diverted, s.handed_back, s.emit_count) == (1, 0, 0, 1)
    assert len(e) == 0


async def test_diverted_open_never_calls(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b)
    gate = Gate()
    b.trip_now()
    clock.advance(0.25)
    out = await e.emit("a", gate)
    assert out == Diverted(Divert("open", retry_after=0.75))
    assert not out.delivered and not out.reason.called
    assert gate.calls == []
    assert e.drain(10) == [("a", ROUTINE)]
    assert e.stats().diverted_open == 1


def test_an_emit_not_admitted_never_suspends(clock, make_emitter):
    # Rejected by the breaker or the bulkhead: the coroutine finishes in its
    # first step, without yielding to the event loop once.
    b = Breaker(clock=clock)
    e = make_emitter(b)
    b.force_open()
    coro = e.emit("a", ok, CRITICAL)
    with pytest.raises(StopIteration) as info:
        coro.send(None)
    assert info.value.value == Diverted(Divert("open", retry_after=None))
    assert e.drain(1) == [("a", CRITICAL)]


async def test_diverted_forced_open_has_no_retry_time(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b)
    b.force_open()
    out = await e.emit("a", ok)
    assert out == Diverted(Divert("open", retry_after=None))
    assert e.drain(10) == [("a", ROUTINE)]


async def test_diverted_bulkhead_full_never_calls(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock), bulkhead=2, timeout=1.0)
    gate = Gate()
    held = [asyncio.create_task(e.emit(i, gate)) for i in range(2)]
    await settle()
    assert e.stats().bulkhead_in_flight == 2
    out = await e.emit("third", gate)
    assert out == Diverted(Divert("bulkhead_full"))
    assert gate.calls == [0, 1]
    gate.open()
    assert [await t for t in held] == [Delivered("late 0"), Delivered("late 1")]
    s = e.stats()
    assert (s.bulkhead_in_flight, s.diverted_bulkhead, s.delivered) == (0, 1, 2)
    assert e.drain(10) == [("third", ROUTINE)]


async def test_diverted_timed_out_cuts_the_call_at_the_timeout(clock, make_emitter):
    b = Breaker(clock=clock, latency_threshold=0.1, error_rate=1.0)
    e = make_emitter(b, timeout=0.5)
    cancelled = []

    async def hang(x):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(x)
            raise

    task = asyncio.create_task(e.emit("a", hang))
    await settle()
    clock.advance(0.4)
    await settle()
    assert not task.done()
    clock.advance(0.1)
    await settle()
    assert task.done()
    out = task.result()
    assert out == Diverted(Divert("timed_out", elapsed=0.5))
    assert out.reason.called
    assert cancelled == ["a"]
    close_window(b, clock)
    t = b.snapshot().totals
    assert (t.calls, t.errors, t.slow) == (1, 1, 1)  # a timeout is a failure, and slow
    assert e.drain(10) == [("a", ROUTINE)]


async def test_the_timeout_runs_from_admission(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock), timeout=0.5)
    gate = Gate()
    task = asyncio.create_task(e.emit("a", gate))
    await asyncio.sleep(0)  # the emit is admitted and its call started
    clock.advance(0.5)  # the whole budget
    await settle()
    done = task.done()
    if not done:
        clock.advance(0.5)
        await settle()
    assert task.result() == Diverted(Divert("timed_out", elapsed=0.5))
    assert done


async def test_diverted_failed_keeps_the_exception(clock, make_emitter):
    b = Breaker(clock=clock, error_rate=1.0)
    e = make_emitter(b)
    out = await e.emit("a", bad, CRITICAL)
    assert isinstance(out, Diverted) and out.reason.kind == "failed"
    assert isinstance(out.reason.error, ConnectionError) and str(out.reason.error) == "refused a"
    assert out.reason.called and out.displaced is None
    close_window(b, clock)
    assert b.snapshot().totals.errors == 1
    assert e.drain(10) == [("a", CRITICAL)]
    assert e.stats().diverted_failed == 1


async def test_an_own_timeout_error_from_the_call_is_a_failure(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock), timeout=0.5)

    async def raises_timeout(x):
        raise TimeoutError("the consumer's own")

    out = await e.emit("a", raises_timeout)
    assert out.reason.kind == "failed" and isinstance(out.reason.error, TimeoutError)
    e.drain(10)


async def test_handed_back_queue_full(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock, error_rate=1.0), capacity=2)
    assert e.capacity == 2
    assert e.enqueue("c1", CRITICAL) is None
    assert e.enqueue("c2", CRITICAL) is None
    out = await e.emit("r", bad, ROUTINE)
    assert isinstance(out, HandedBack)
    assert (out.trigger, out.priority, out.not_queued) == ("r", ROUTINE, "queue_full")
    assert out.reason.kind == "failed"
    assert e.stats().handed_back_full == 1
    # Equal class does not displace either.
    out = await e.emit("c3", bad, CRITICAL)
    assert isinstance(out, HandedBack) and out.not_queued == "queue_full"
    assert e.drain(10) == [("c1", CRITICAL), ("c2", CRITICAL)]


async def test_handed_back_shut_down(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b)
    assert e.shutdown() == []
    assert e.is_shut_down
    out = await e.emit("a", bad)
    assert isinstance(out, HandedBack) and (out.trigger, out.not_queued) == ("a", "shut_down")
    assert out.reason.kind == "failed"
    assert await e.emit("b", ok) == Delivered("sent b")  # delivery goes on
    b.trip_now()
    out = await e.emit("c", ok)
    assert (out.not_queued, out.reason.kind) == ("shut_down", "open")
    assert e.stats().handed_back_shut_down == 2


async def test_a_higher_class_displaces_the_oldest_of_the_lowest_class(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b, capacity=3)
    b.force_open()
    for t, p in [("r1", ROUTINE), ("i1", IDLE), ("i2", IDLE)]:
        assert (await e.emit(t, ok, p)).displaced is None
    out = await e.emit("c1", ok, CRITICAL)
    assert out.displaced == ("i1", IDLE)
    out = await e.emit("r2", ok, ROUTINE)
    assert out.displaced == ("i2", IDLE)
    out = await e.emit("c2", ok, CRITICAL)
    assert out.displaced == ("r1", ROUTINE)
    out = await e.emit("i3", ok, IDLE)  # nothing below IDLE
    assert isinstance(out, HandedBack) and out.not_queued == "queue_full"
    assert e.stats().displaced == 3
    assert e.drain(10) == [("c1", CRITICAL), ("c2", CRITICAL), ("r2", ROUTINE)]


async def test_emit_blocking_outcomes(clock, make_emitter):
    b = Breaker(clock=clock, latency_threshold=0.1, error_rate=1.0)
    e = make_emitter(b, timeout=0.5)
    assert e.emit_blocking("a", lambda x: x + "!") == Delivered("a!")

    def overrun(x):
        clock.advance(0.75)
        return x

    assert e.emit_blocking("b", overrun) == Delivered("b")  # late, still delivered

    def late_failure(x):
        clock.advance(0.75)
        raise OSError(x)

    out = e.emit_blocking("c", late_failure)
    assert out.reason.kind == "timed_out"
    out = e.emit_blocking("d", lambda x: 1 / 0)
    assert out.reason.kind == "failed" and isinstance(out.reason.error, ZeroDivisionError)
    s = e.stats()
    assert (s.delivered, s.overran, s.diverted_timeout, s.diverted_failed) == (2, 1, 1, 1)
    close_window(b, clock)
    t = b.snapshot().totals
    assert (t.calls, t.errors, t.slow) == (4, 3, 2)  # the overrun counts as timed out: failed, slow
    assert e.drain(10) == [("c", ROUTINE), ("d", ROUTINE)]


# ----------------------------------------------------------------------
# The queue by hand.


def test_enqueue_drain_highest_class_first_oldest_first(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock), capacity=8)
    for t, p in [("r1", ROUTINE), ("i1", IDLE), ("c1", CRITICAL), ("r2", ROUTINE), ("c2", CRITICAL)]:
        assert e.enqueue(t, p) is None
    assert len(e) == 5
    assert e.drain(3) == [("c1", CRITICAL), ("c2", CRITICAL), ("r1", ROUTINE)]
    assert e.drain(10) == [("r2", ROUTINE), ("i1", IDLE)]
    s = e.stats()
    assert (s.queued_by_hand, s.drained, s.queued) == (5, 5, 0)


def test_enqueue_full_and_shut_down_raise_with_the_trigger(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock), capacity=1)
    e.enqueue("c", CRITICAL)
    with pytest.raises(QueueFull) as info:
        e.enqueue("r", ROUTINE)
    assert (info.value.trigger, info.value.priority) == ("r", ROUTINE)
    assert e.shutdown() == [("c", CRITICAL)]
    with pytest.raises(EmitterShutDown) as info:
        e.enqueue("x", IDLE)
    assert (info.value.trigger, info.value.priority) == ("x", IDLE)


def test_enqueue_displaces_and_hands_the_displaced_back(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock), capacity=1)
    e.enqueue("i", IDLE)
    assert e.enqueue("c", CRITICAL) == ("i", IDLE)
    assert e.drain(5) == [("c", CRITICAL)]


@pytest.mark.parametrize("priority", [3, -1, "high", None])
def test_a_bad_priority_is_refused(clock, make_emitter, priority):
    e = make_emitter(Breaker(clock=clock))
    with pytest.raises((TypeError, ValueError), match="priority"):
        e.enqueue("a", priority)
    assert len(e) == 0


@pytest.mark.parametrize(
    "kw, name",
    [(dict(capacity=0), "capacity"), (dict(bulkhead=0), "bulkhead"), (dict(timeout=0), "timeout"),
     (dict(timeout=-1.0), "timeout"), (dict(timeout=float("nan")), "timeout")],
)
def test_emitter_settings_are_checked(kw, name):
    from tailguard import Emitter

    with pytest.raises(ValueError, match=name):
        Emitter(Breaker(), **kw)


# ----------------------------------------------------------------------
# Cancellation.


async def test_a_cancelled_emit_gives_back_the_bulkhead_slot_and_the_probe(clock, make_emitter):
    b = Breaker(clock=clock, half_open_probes=1)
    e = make_emitter(b, bulkhead=1, timeout=5.0)
    gate = Gate()
    b.trip_now()
    clock.advance(1.0)
    task = asyncio.create_task(e.emit("probe", gate, CRITICAL))
    await settle()
    assert gate.calls == ["probe"]
    s = e.stats()
    assert (s.bulkhead_in_flight, b.snapshot().probes_in_flight) == (1, 1)
    busy = await e.emit("busy", ok)  # the breaker first: its one probe slot is taken
    assert busy.reason.kind == "open" and not busy.reason.called
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    s = e.stats()
    assert (s.bulkhead_in_flight, s.cancelled) == (0, 1)
    snap = b.snapshot()
    assert (snap.probes_in_flight, snap.state) == (0, State.HALF_OPEN)  # no verdict
    # A new probe is admitted, through the emitter too.
    out = await e.emit("next", ok)
    assert out == Delivered("sent next")
    assert len(e) == 1  # "busy"; "probe" went back to the caller with its task
    e.drain(5)


async def test_a_cancelled_emit_is_not_judged(clock, make_emitter):
    b = Breaker(clock=clock, trip_windows=1, min_calls=1, error_rate=0.0)
    e = make_emitter(b, timeout=5.0)
    gate = Gate()
    tasks = [asyncio.create_task(e.emit(i, gate)) for i in range(5)]
    await settle()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    close_window(b, clock)
    s = b.snapshot()
    assert (s.state, s.totals.calls, s.totals.errors) == (State.CLOSED, 0, 0)
    assert e.stats().cancelled == 5


async def test_cancelling_an_emit_while_its_cut_call_cleans_up_propagates(clock, make_emitter):
    e = make_emitter(Breaker(clock=clock), bulkhead=1, timeout=0.5)
    cleanup = asyncio.Event()

    async def slow_cleanup(x):
        try:
            await asyncio.Event().wait()
        finally:
            await cleanup.wait()  # the consumer takes its time to clean up

    task = asyncio.create_task(e.emit("a", slow_cleanup))
    await settle()
    clock.advance(0.5)  # cut: the call is cancelled and cleans up
    await settle()
    assert not task.done()
    task.cancel()  # the router gives up on this emit
    await settle()
    cleanup.set()
    await settle()
    assert task.done()
    e.drain(5)
    assert task.cancelled(), f"the cancellation was swallowed: {task.result()}"


def test_emit_blocking_interrupted_gives_the_slots_back_with_no_verdict(clock, make_emitter):
    b = Breaker(clock=clock, half_open_probes=1, error_rate=0.0, min_calls=1)
    e = make_emitter(b, bulkhead=1)
    b.trip_now()
    clock.advance(1.0)

    def interrupted(x):
        assert e.stats().bulkhead_in_flight == 1
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        e.emit_blocking("a", interrupted)
    s = e.stats()
    assert (s.cancelled, s.bulkhead_in_flight, len(e)) == (1, 0, 0)
    assert b.snapshot().probes_in_flight == 0 and b.state == State.HALF_OPEN
    assert e.emit_blocking("b", lambda x: x) == Delivered("b")


async def test_cancel_while_the_timer_is_pending_on_the_system_clock(make_emitter):
    # The system-clock path (asyncio.timeout) gives the slots back too.
    b = Breaker(half_open_probes=1, base_backoff=1e-6, max_backoff=1e-6)
    e = make_emitter(b, bulkhead=1, timeout=60.0)
    gate = Gate()
    b.trip_now()
    await asyncio.sleep(0.001)  # past the 1 µs backoff (real time: this breaker is on the system clock)
    task = asyncio.create_task(e.emit("probe", gate))
    await settle()
    assert e.stats().bulkhead_in_flight == 1 and b.snapshot().probes_in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert e.stats().bulkhead_in_flight == 0 and b.snapshot().probes_in_flight == 0
    assert e.stats().cancelled == 1
    p = b.allow()
    assert p.is_probe
    p.abandon()


# ----------------------------------------------------------------------
# Shutdown.


async def test_shutdown_returns_the_queue_highest_class_first(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b, capacity=8)
    b.force_open()
    for t, p in [("i1", IDLE), ("r1", ROUTINE), ("c1", CRITICAL), ("i2", IDLE), ("c2", CRITICAL)]:
        await e.emit(t, ok, p)
    sunk = []
    items = e.shutdown(lambda t, p: sunk.append((t, p)))
    expected = [("c1", CRITICAL), ("c2", CRITICAL), ("r1", ROUTINE), ("i1", IDLE), ("i2", IDLE)]
    assert items == expected and sunk == expected
    assert len(e) == 0 and e.is_shut_down
    assert e.shutdown() == []  # again: nothing more


async def test_a_raising_sink_keeps_the_rest_in_unsunk(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b, capacity=8)
    b.force_open()
    for t, p in [("r1", ROUTINE), ("c1", CRITICAL), ("r2", ROUTINE), ("i1", IDLE)]:
        await e.emit(t, ok, p)
    sunk = []

    def sink(t, p):
        if t == "r2":
            raise OSError("disk full")
        sunk.append(t)

    with pytest.raises(OSError, match="disk full") as info:
        e.shutdown(sink)
    assert sunk == ["c1", "r1"]
    assert info.value.unsunk == [("r2", ROUTINE), ("i1", IDLE)]
    assert len(e) == 0
    s = e.stats()
    assert s.drained == 4  # counted out of the queue: nothing lost, the rest is in unsunk


# ----------------------------------------------------------------------
# Replay.


async def test_replay_delivers_highest_class_first(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b, capacity=8)
    for t, p in [("i1", IDLE), ("r1", ROUTINE), ("c1", CRITICAL)]:
        e.enqueue(t, p)
    got = []

    async def send(x):
        got.append(x)

    replayed = await e.replay(send, max=10)
    assert replayed.delivered == 3 and got == ["c1", "r1", "i1"]
    assert e.stats().replayed == 3


async def test_the_timeout_on_the_system_clock(make_emitter):
    # The one emitter test on real time: a breaker on the system clock
    # times its calls with asyncio.timeout; 20 ms, bounded.
    b = Breaker()
    e = make_emitter(b, timeout=0.02)

    async def hang(x):
        await asyncio.Event().wait()

    out = await asyncio.wait_for(e.emit("a", hang), 5.0)
    assert out.reason.kind == "timed_out"
    assert 0.02 <= out.reason.elapsed < 2.0
    assert e.stats().diverted_timeout == 1
    assert e.drain(1) == [("a", ROUTINE)]


async def test_a_plain_int_priority_comes_back_as_a_priority(clock, make_emitter):
    b = Breaker(clock=clock)
    e = make_emitter(b)
    b.force_open()
    await e.emit("a", ok, 2)
    (item,) = e.drain(1)
    assert item == ("a", CRITICAL) and type(item[1]) is Priority
