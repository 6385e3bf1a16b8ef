"""``@breaker`` on a coroutine function: the native awaitable each call
returns (``GuardedCall``). What an ``async def`` caller relies on (values,
exceptions, tasks, introspection) and what the breaker relies on (a permit
taken at the first await, one verdict, slots always given back)."""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import warnings
import weakref

import pytest

from tailguard import Breaker, BreakerOpen, State

from conftest import close_window, settle


def totals(b: Breaker, clock):
    close_window(b, clock)
    t = b.snapshot().totals
    return (t.calls, t.errors, t.slow, t.cancelled)


class Oops(Exception):
    pass


# ----------------------------------------------------------------------
# What the awaited call returns and raises.


@pytest.mark.parametrize(
    "value",
    [None, 0, 1, "text", (), (1, 2), (None,), [1], {"a": 1}, ValueError("returned, not raised"),
     StopIteration(7), KeyboardInterrupt()],
    ids=["none", "zero", "one", "str", "empty_tuple", "pair", "tuple_of_none", "list", "dict", "exception",
         "stop_iteration", "base_exception"],
)
async def test_the_call_returns_what_the_coroutine_returns(clock, value):
    b = Breaker(clock=clock)

    @b
    async def send():
        await asyncio.sleep(0)
        return value

    @b
    async def at_once():  # returns on its first step
        return value

    got, got_at_once = await send(), await at_once()
    assert got is value and got_at_once is value
    assert totals(b, clock) == (2, 0, 0, 0)


async def test_a_value_returned_while_the_caller_handles_an_exception_is_that_value(clock):
    # CPython chains to the exception being handled when StopIteration is
    # set: the value must still come through unchanged.
    b = Breaker(clock=clock)

    @b
    async def send(v):
        return v

    for v in (5, "x", (1, 2), ValueError("v")):
        try:
            raise Oops("handled")
        except Oops:
            assert await send(v) is v
    assert totals(b, clock) == (4, 0, 0, 0)


@pytest.mark.parametrize(
    "exc, counted",
    [(Oops("down"), (1, 1, 0, 0)), (StopIteration(), (1, 1, 0, 0)), (StopAsyncIteration(), (1, 1, 0, 0)),
     (KeyboardInterrupt(), (0, 0, 0, 0)), (GeneratorExit(), (0, 0, 0, 0))],
    ids=["exception", "stop_iteration", "stop_async_iteration", "keyboard_interrupt", "generator_exit"],
)
async def test_a_raise_is_a_failure_unless_it_is_an_interruption(clock, exc, counted):
    b = Breaker(clock=clock, error_rate=1.0)

    @b
    async def send():
        await asyncio.sleep(0)
        raise exc

    # A StopIteration raised in a coroutine becomes a RuntimeError, as in
    # any coroutine.
    expected = RuntimeError if isinstance(exc, StopIteration) else type(exc)
    with pytest.raises(expected):
        await send()
    assert totals(b, clock) == counted


# ----------------------------------------------------------------------
# When the permit is taken, and that it always comes back.


async def test_the_permit_is_taken_at_the_first_await_not_at_the_call(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, half_open_probes=1)
    b.trip_now()
    clock.advance(1.0)
    pending = b(asyncio.sleep)(0)  # called, not awaited: no probe taken
    assert b.snapshot().probes_in_flight == 0
    clock.advance(5.0)  # time before the first await is not the call's latency
    await pending
    assert b.snapshot().probes_in_flight == 0
    close_window(b, clock)
    t = b.snapshot().totals
    assert (t.calls, t.errors, t.slow) == (1, 0, 0)


async def test_a_call_never_awaited_takes_no_permit_and_warns_with_the_function_name(clock):
    b = Breaker(clock=clock, half_open_probes=1)

    @b
    async def forgotten():
        return 1

    b.trip_now()
    clock.advance(1.0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        forgotten()
        gc.collect()
    assert any("forgotten" in str(w.message) and "never awaited" in str(w.message) for w in seen), seen
    assert b.snapshot().probes_in_flight == 0
    p = b.allow()  # the probe slot is free
    assert p.is_probe
    p.abandon()


async def test_a_rejected_call_raises_at_the_await_closes_its_coroutine_and_runs_nothing(clock):
    b = Breaker(clock=clock)
    ran = []

    @b
    async def send():
        ran.append(1)

    b.force_open()
    call = send()  # no exception yet: the breaker is asked at the await
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "never awaited" warning either
        with pytest.raises(BreakerOpen):
            await call
        gc.collect()
    assert ran == []
    b.reset()


@pytest.mark.parametrize("how", ["cancel", "wait_for", "timeout", "close_by_hand"])
async def test_a_call_cut_short_gives_its_probe_back_with_no_verdict(clock, how):
    b = Breaker(clock=clock, half_open_probes=1)
    gate = asyncio.Event()

    @b
    async def send():
        await gate.wait()

    b.trip_now()
    clock.advance(1.0)
    if how == "cancel":
        task = asyncio.create_task(send())
        await settle()
        assert b.snapshot().probes_in_flight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    elif how == "wait_for":
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(send(), 0.001)
    elif how == "timeout":
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.001):
                await send()
    else:
        call = send()
        call.send(None)  # the first step: the probe is taken, the call waits on the gate
        assert b.snapshot().probes_in_flight == 1
        call.close()
    s = b.snapshot()
    assert s.probes_in_flight == 0 and s.state == State.HALF_OPEN
    assert totals(b, clock)[:2] == (0, 0)


async def test_an_exception_thrown_in_and_handled_by_the_coroutine_is_no_verdict_until_it_ends(clock):
    b = Breaker(clock=clock, error_rate=1.0)

    @b
    async def send():
        try:
            await asyncio.sleep(3600)
        except Oops:
            return "recovered"

    call = send()
    call.send(None)  # suspended in sleep
    with pytest.raises(StopIteration) as info:
        call.throw(Oops("thrown in"))
    assert info.value.value == "recovered"
    assert totals(b, clock) == (1, 0, 0, 0)


async def test_a_first_send_of_a_value_is_refused_with_no_permit_taken(clock):
    b = Breaker(clock=clock, half_open_probes=1)

    @b
    async def send():
        return 1

    b.trip_now()
    clock.advance(1.0)
    call = send()
    with pytest.raises(TypeError, match="non-None"):
        call.send("too early")
    assert b.snapshot().probes_in_flight == 0
    assert await call == 1  # still usable, as a coroutine is
    assert totals(b, clock) == (1, 0, 0, 0)


async def test_a_call_awaited_twice_raises_and_is_judged_once(clock):
    b = Breaker(clock=clock)

    @b
    async def send():
        return 1

    call = send()
    assert await call == 1
    with pytest.raises(RuntimeError):
        await call
    assert totals(b, clock) == (1, 0, 0, 0)


async def test_a_thousand_calls_in_flight_on_one_breaker_are_each_judged_once(clock):
    b = Breaker(clock=clock, error_rate=1.0, latency_threshold=10.0)
    gate = asyncio.Event()

    @b
    async def send(i):
        await gate.wait()
        if i % 10 == 0:
            raise Oops(i)
        return i

    tasks = [asyncio.create_task(send(i)) for i in range(1000)]
    await settle(3)
    gate.set()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(isinstance(d, Oops) for d in done) == 100
    assert [d for d in done if not isinstance(d, Oops)] == [i for i in range(1000) if i % 10]
    assert totals(b, clock) == (1000, 100, 0, 0)


async def test_a_suspended_call_in_a_reference_cycle_is_collected_with_no_verdict(clock):
    b = Breaker(clock=clock, half_open_probes=1)
    b.trip_now()
    clock.advance(1.0)

    @b
    async def send(box):
        await asyncio.get_running_loop().create_future()  # never set

    box: list = []
    call = send(box)
    box.append(call)  # the call -> its coroutine -> its frame -> box -> the call
    call.send(None)  # suspended, holding the probe
    assert b.snapshot().probes_in_flight == 1
    ref = weakref.ref(call)
    del call, box
    gc.collect()
    assert ref() is None
    assert b.snapshot().probes_in_flight == 0
    assert totals(b, clock) == (0, 0, 0, 0)  # collected mid-flight: no verdict, as when closed


def test_a_call_stepped_on_one_thread_refuses_every_other_thread_until_the_step_ends(clock):
    """The call's state is guarded by the GIL, which a step may release:
    another thread that reaches the call meanwhile is refused as a running
    coroutine refuses, and the step ends with its one verdict."""
    import threading

    b = Breaker(clock=clock, half_open_probes=1)
    b.trip_now()
    clock.advance(1.0)
    inside, resume = threading.Event(), threading.Event()

    @b
    async def send():
        inside.set()
        assert resume.wait(10)  # a blocking wait: the GIL is released
        gc.collect()  # the collector visits the call mid-step
        return 7

    call = send()
    got = {}

    def step():
        try:
            call.send(None)
        except StopIteration as e:
            got["value"] = e.value

    t = threading.Thread(target=step)
    t.start()
    assert inside.wait(10)
    refusals = [lambda: call.send(None), lambda: call.throw(Oops()), call.close, call.__await__]
    for refused in refusals:
        with pytest.raises(ValueError, match="already executing"):
            refused()
    assert call.cr_running and call.cr_frame is None
    assert call.__name__ == "send" and "send" in repr(call)
    resume.set()
    t.join(10)
    assert got == {"value": 7}
    assert not call.cr_running
    assert b.snapshot().probes_in_flight == 0
    assert b.snapshot().probe_successes == 1


async def test_a_call_in_flight_keeps_its_breaker_when_nothing_else_does(clock):
    """The permit borrows the breaker the decorated function holds: a call
    that outlives every other reference to both still records its verdict
    (and a probe's), on the breaker it was admitted by."""
    b = Breaker(clock=clock, half_open_probes=1)
    b.trip_now()
    clock.advance(1.0)
    snapshot = b.snapshot  # a bound method: keeps the Python object, not the decorator
    fut = asyncio.get_running_loop().create_future()

    @b
    async def send():
        return await fut

    call = send()
    call.send(None)  # suspended, holding the probe
    dead = weakref.ref(send)
    del send, b
    gc.collect()
    assert dead() is not None  # the call keeps the decorated function
    fut.set_result(5)
    with pytest.raises(StopIteration) as stopped:
        call.send(None)
    assert stopped.value.value == 5
    del call
    gc.collect()
    assert dead() is None
    assert snapshot().probes_in_flight == 0 and snapshot().probe_successes == 1


# ----------------------------------------------------------------------
# What frameworks and asyncio see.


async def test_it_is_a_coroutine_function_to_inspect_and_asyncio_and_its_calls_are_coroutines(clock):
    b = Breaker(clock=clock)

    async def send(trigger: str, *, retries: int = 2) -> str:
        """Sends a trigger."""
        return trigger

    guarded = b(send)
    assert inspect.iscoroutinefunction(guarded) and asyncio.iscoroutinefunction(guarded)
    assert inspect.signature(guarded) == inspect.signature(send)
    assert (guarded.__name__, guarded.__qualname__, guarded.__doc__) == (send.__name__, send.__qualname__, send.__doc__)
    assert guarded.__wrapped__ is send and guarded.__kwdefaults__ == {"retries": 2}
    call = guarded("t")
    assert asyncio.iscoroutine(call) and inspect.isawaitable(call)
    assert await call == "t"
    assert await asyncio.create_task(guarded("task")) == "task"
    assert await asyncio.ensure_future(guarded("future")) == "future"
    assert await asyncio.gather(guarded("a"), guarded("b")) == ["a", "b"]
    assert await functools.partial(guarded, "partial")() == "partial"
    assert totals(b, clock)[:2] == (6, 0)


async def test_it_guards_methods_classmethods_and_staticmethods(clock):
    b = Breaker(clock=clock)

    class Client:
        def __init__(self, name):
            self.name = name

        @b
        async def send(self, t):
            return (self.name, t)

        @classmethod
        @b
        async def kind(cls, t):
            return (cls.__name__, t)

        @staticmethod
        @b
        async def plain(t):
            return t

    c = Client("c")
    assert inspect.iscoroutinefunction(c.send)
    assert await c.send(1) == ("c", 1)
    assert await Client.send(c, 2) == ("c", 2)
    assert await c.kind(3) == ("Client", 3)
    assert await c.plain(4) == 4
    assert totals(b, clock)[:2] == (4, 0)


async def test_any_awaitable_the_function_returns_is_guarded(clock):
    b = Breaker(clock=clock, error_rate=1.0)

    class Later:
        def __await__(self):
            yield from asyncio.sleep(0).__await__()
            return "custom"

    def future_of(v):
        f = asyncio.get_running_loop().create_future()
        f.set_result(v)
        return f

    for make, expected in [(Later, "custom"), (lambda: future_of("future"), "future")]:
        assert await b(_returning(make))() == expected
    assert totals(b, clock)[:2] == (2, 0)


def _returning(make):
    """A callable that reads as a coroutine function (function-like, with a
    coroutine's code flags) but whose call returns ``make()``."""

    async def template():
        pass

    class Returns:
        __code__ = template.__code__
        __name__ = "returns"
        __defaults__ = None
        __kwdefaults__ = None
        __annotations__: dict = {}

        def __call__(self):
            return make()

    return Returns()


async def test_a_call_that_returns_no_awaitable_is_a_type_error_at_the_call_with_no_verdict(clock):
    b = Breaker(clock=clock, error_rate=1.0)
    guarded = b(_returning(lambda: 42))
    with pytest.raises(TypeError, match="not an awaitable"):
        guarded()
    assert totals(b, clock) == (0, 0, 0, 0)
