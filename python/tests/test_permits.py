"""Permits: one verdict each, dropped ones, the context manager and the
``@breaker`` decorator on plain and coroutine functions."""

from __future__ import annotations

import asyncio
import gc

import pytest

from tailguard import Breaker, BreakerOpen, Permit, PermitUsed, State

from conftest import close_window, settle


def totals(b: Breaker, clock):
    close_window(b, clock)
    t = b.snapshot().totals
    return (t.calls, t.errors, t.slow, t.cancelled)


# ----------------------------------------------------------------------
# One verdict per permit.


@pytest.mark.parametrize(
    "first, counted",
    [(lambda p: p.record(True), (1, 0, 0, 0)), (lambda p: p.record_latency(0.01, False), (1, 1, 0, 0)),
     (lambda p: p.record_timeout(0.5), (1, 1, 1, 0)), (lambda p: p.abandon(), (0, 0, 0, 0))],
    ids=["record", "record_latency", "record_timeout", "abandon"],
)
@pytest.mark.parametrize(
    "second",
    [lambda p: p.record(True), lambda p: p.record(False), lambda p: p.record_latency(0.01),
     lambda p: p.record_timeout(0.5), lambda p: p.abandon()],
    ids=["record", "record_false", "record_latency", "record_timeout", "abandon"],
)
def test_a_permit_used_twice_raises_permit_used_and_counts_once(clock, first, counted, second):
    b = Breaker(clock=clock)
    p = b.allow()
    assert isinstance(p, Permit) and not p.recorded
    first(p)
    assert p.recorded
    with pytest.raises(PermitUsed, match="already recorded"):
        second(p)
    assert isinstance(PermitUsed("x"), RuntimeError)
    assert totals(b, clock) == counted


def test_verdicts_are_counted_as_given(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, error_rate=1.0)
    b.allow().record(True)
    b.allow().record(False)
    b.allow().record_latency(0.5, True)  # slow
    b.allow().record_latency(0.05, False)
    b.allow().record_timeout(0.2)  # failed, and slow
    b.allow().abandon()  # no verdict: not a call
    assert totals(b, clock) == (5, 3, 2, 0)


def test_record_measures_latency_on_the_breakers_clock(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, error_rate=1.0)
    p = b.allow()
    clock.advance(0.3)
    p.record(True)
    q = b.allow()
    clock.advance(0.05)
    q.record(True)
    assert totals(b, clock)[2] == 1


def test_a_permit_collected_without_a_verdict_gives_its_probe_slot_back(clock):
    b = Breaker(clock=clock, half_open_probes=1)
    b.trip_now()
    clock.advance(1.0)
    p = b.allow()
    assert p.is_probe and b.snapshot().probes_in_flight == 1
    with pytest.raises(BreakerOpen, match="probes_busy"):
        b.allow()
    del p
    gc.collect()
    s = b.snapshot()
    assert s.probes_in_flight == 0
    assert s.state == State.HALF_OPEN  # no verdict: the round is not decided
    again = b.allow()
    assert again.is_probe
    again.record(True)
    assert b.snapshot().totals.cancelled == 0  # counted at the window close
    close_window(b, clock)
    t = b.snapshot().totals
    assert (t.cancelled, t.errors) == (1, 0)


def test_a_dropped_permit_in_closed_is_cancelled_not_failed(clock):
    b = Breaker(clock=clock, trip_windows=1, min_calls=1, error_rate=0.0)
    for _ in range(10):
        b.allow()  # dropped at once
    assert totals(b, clock) == (0, 0, 0, 10)
    assert b.state == State.CLOSED


def test_abandon_gives_a_probe_slot_back_with_no_verdict(clock):
    b = Breaker(clock=clock)
    b.trip_now()
    clock.advance(1.0)
    p = b.allow()
    p.abandon()
    assert b.snapshot().probes_in_flight == 0
    assert b.allow().is_probe


# ----------------------------------------------------------------------
# The context manager.


def test_with_block_records_success(clock):
    b = Breaker(clock=clock, error_rate=1.0)
    with b.allow() as p:
        assert isinstance(p, Permit)
    assert p.recorded
    assert totals(b, clock) == (1, 0, 0, 0)


def test_with_block_exception_is_a_failure_and_is_not_suppressed(clock):
    b = Breaker(clock=clock, error_rate=1.0)
    with pytest.raises(KeyError, match="boom"):
        with b.allow():
            raise KeyError("boom")
    assert totals(b, clock) == (1, 1, 0, 0)


def test_with_block_measures_latency(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, error_rate=1.0)
    with b.allow():
        clock.advance(0.2)
    assert totals(b, clock) == (1, 0, 1, 0)


def test_a_verdict_recorded_inside_the_block_stands(clock):
    b = Breaker(clock=clock, error_rate=1.0)
    with b.allow() as p:
        p.record(False)
    assert totals(b, clock) == (1, 1, 0, 0)


# ----------------------------------------------------------------------
# The decorator on plain functions.


def test_decorator_records_returns_and_raises(clock):
    b = Breaker(clock=clock, error_rate=1.0)
    calls = []

    @b
    def send(x, *, twice=False):
        """Sends x."""
        calls.append(x)
        if x < 0:
            raise ValueError(x)
        return x * (2 if twice else 1)

    assert send(2) == 2 and send(3, twice=True) == 6
    with pytest.raises(ValueError):
        send(-1)
    assert send.__name__ == "send" and send.__wrapped__.__doc__ == "Sends x."
    assert calls == [2, 3, -1]
    assert totals(b, clock) == (3, 1, 0, 0)


def test_decorator_keeps_the_functions_docstring():
    b = Breaker()

    @b
    def send(x):
        """Sends x."""

    assert send.__doc__ == "Sends x."


def test_decorator_open_raises_without_calling(clock):
    b = Breaker(clock=clock)
    calls = []

    @b
    def send(x):
        calls.append(x)

    b.trip_now()
    with pytest.raises(BreakerOpen) as info:
        send(1)
    assert (info.value.reason, info.value.retry_after) == ("open", 1.0)
    assert calls == []
    assert b.snapshot().rejections.open == 1


def test_decorator_measures_latency(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, error_rate=1.0)

    @b
    def slow():
        clock.advance(0.3)

    slow()
    assert totals(b, clock) == (1, 0, 1, 0)


def test_decorator_on_a_method(clock):
    b = Breaker(clock=clock, error_rate=1.0)

    class Client:
        def __init__(self):
            self.sent = []

        @b
        def send(self, x):
            self.sent.append(x)
            return len(self.sent)

    c = Client()
    assert c.send("a") == 1 and c.send("b") == 2
    assert c.sent == ["a", "b"]
    assert totals(b, clock) == (2, 0, 0, 0)


def test_sync_decorator_interrupted_is_no_verdict_like_the_async_one(clock):
    b = Breaker(clock=clock, error_rate=1.0)

    @b
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert totals(b, clock) == (0, 0, 0, 0)


async def test_async_decorator_interrupted_is_no_verdict(clock):
    b = Breaker(clock=clock, error_rate=1.0)

    @b
    async def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await interrupted()
    assert totals(b, clock) == (0, 0, 0, 0)


def test_decorating_a_non_callable_is_a_type_error():
    with pytest.raises(TypeError):
        Breaker()(42)


# ----------------------------------------------------------------------
# The decorator on coroutine functions.


async def test_async_decorator_records_returns_and_raises(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, error_rate=1.0)

    @b
    async def send(x):
        await asyncio.sleep(0)
        if x == "slow":
            clock.advance(0.5)
        if x == "bad":
            raise ConnectionError(x)
        return x.upper()

    assert asyncio.iscoroutinefunction(send)
    assert await send("a") == "A"
    assert await send("slow") == "SLOW"
    with pytest.raises(ConnectionError):
        await send("bad")
    assert totals(b, clock) == (3, 1, 1, 0)


async def test_async_decorator_open_raises_without_calling(clock):
    b = Breaker(clock=clock)
    calls = []

    @b
    async def send(x):
        calls.append(x)

    b.force_open()
    with pytest.raises(BreakerOpen) as info:
        await send(1)
    assert info.value.reason == "forced_open" and info.value.retry_after is None
    assert calls == []


async def test_async_decorator_cancellation_gives_the_probe_back(clock):
    b = Breaker(clock=clock, half_open_probes=1)
    hang = asyncio.Event()

    @b
    async def send(x):
        await hang.wait()

    b.trip_now()
    clock.advance(1.0)
    task = asyncio.create_task(send(1))
    await settle()
    assert b.snapshot().probes_in_flight == 1
    with pytest.raises(BreakerOpen, match="probes_busy"):
        b.allow()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    s = b.snapshot()
    assert s.probes_in_flight == 0
    assert s.state == State.HALF_OPEN  # no verdict on the consumer
    p = b.allow()
    assert p.is_probe
    p.record(True)
    close_window(b, clock)
    assert b.snapshot().totals.errors == 0
