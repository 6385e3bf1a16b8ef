"""A hostile review of the Python package (helper session): listeners that
raise, re-enter, hold the breaker alive or release the GIL at interpreter
exit; calls that are not async, raise BaseException or their own
TimeoutError; the manual clock's sleepers (NaN, float rounding, cancelled
timers); exceptions that cross a process boundary; a replay cancelled
after shutdown; two event loops sharing an emitter. Findings are
``xfail(strict=True)`` with the finding as the reason (they fail today;
a fix turns them into errors until the mark is removed); the attacks that
held are kept as regressions. Processes that may hang or abort run in a
subprocess with a timeout."""

import asyncio
import copy
import gc
import inspect
import pickle
import subprocess
import sys
import textwrap
import threading
import weakref

import pytest

from tailguard import (
    Breaker,
    BreakerOpen,
    Emitter,
    EmitterShutDown,
    ManualClock,
    Priority,
    QueueFull,
    Registry,
)


def conserved(e, emitted=None):
    s = e.stats()
    if emitted is not None:
        assert s.emitted == emitted, s
    assert s.into_queue == s.out_of_queue, s
    assert s.bulkhead_in_flight == 0, s


def run_python(code, timeout=30):
    """Runs ``code`` in a fresh interpreter: (returncode, stderr)."""
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p.returncode, p.stderr


async def turns(n=3):
    for _ in range(n):
        await asyncio.sleep(0)


# ----------------------------------------------------------------------
# The manual clock's sleepers.


async def test_sleep_then_advance_by_the_same_amount_wakes_the_sleeper():
    for start, x in [(0.0, 1 / 3), (0.1, 0.2), (0.1, 0.05), (3.3, 0.7)]:
        clock = ManualClock()
        clock.set(start)
        sleeper = asyncio.ensure_future(clock.sleep(x))
        await turns()
        clock.advance(x)
        await turns()
        done = sleeper.done()
        sleeper.cancel()
        assert done, f"set({start}); sleep({x}); advance({x}): still asleep at {clock.now()}"


async def test_an_emit_is_cut_when_the_manual_clock_is_advanced_by_its_timeout():
    clock = ManualClock()
    e = Emitter(Breaker(clock=clock), timeout=0.2, bulkhead=1)
    clock.advance(0.1)

    async def hang(t):
        await asyncio.Future()

    emit = asyncio.ensure_future(e.emit("x", hang))
    await turns()
    clock.advance(0.2)
    await turns(6)
    done = emit.done()
    if not done:
        emit.cancel()
    assert done, "the call outlived its deadline on the manual clock"
    assert emit.result().reason.kind == "timed_out"


async def test_a_nan_sleep_does_not_starve_the_other_sleepers():
    clock = ManualClock()
    poisoned = asyncio.ensure_future(clock.sleep(float("nan")))
    sleeper = asyncio.ensure_future(clock.sleep(1.0))
    await turns()
    clock.advance(5.0)
    await turns()
    done = sleeper.done()
    poisoned.cancel()
    sleeper.cancel()
    assert done, "a sleeper due 4 s ago is still asleep behind a NaN"


async def test_delivered_emits_leave_a_bounded_number_of_deadlines_on_the_manual_clock():
    clock = ManualClock()
    e = Emitter(Breaker(clock=clock), timeout=1.0)

    async def ok(t):
        return t

    for i in range(1_000):
        assert (await e.emit(i, ok)).delivered
    # Cancelled deadlines are purged once they are most of the heap.
    assert len(clock._sleepers) <= 64, f"{len(clock._sleepers)} deadlines of finished emits still held"


def test_advancing_the_manual_clock_past_584_years_is_refused_not_silently_lost():
    clock = ManualClock()
    clock.advance(1e10)
    with pytest.raises(ValueError, match="584 years"):
        clock.advance(1e10)
    assert clock.now() == pytest.approx(1e10)
    with pytest.raises(ValueError, match="584 years"):
        clock.set(2e10)


async def test_a_call_that_is_not_async_is_the_callers_type_error_with_no_verdict_and_no_timer():
    clock = ManualClock()
    b = Breaker(clock=clock)
    e = Emitter(b, timeout=1.0, bulkhead=1)
    with pytest.raises(TypeError, match="not an awaitable"):
        await e.emit("t", lambda t: 5)
    s = e.stats()
    assert (s.cancelled, s.diverted, s.bulkhead_in_flight) == (1, 0, 0)
    assert clock._sleepers == []
    assert judged(b, clock) == (0, 0)


# ----------------------------------------------------------------------
# Exceptions across a process boundary (multiprocessing, concurrent.futures).


@pytest.mark.parametrize(
    "exc",
    [
        BreakerOpen("rejected", 1.5, "open"),
        QueueFull("full", "order-7", Priority.CRITICAL),
        EmitterShutDown("shut down", "order-8", Priority.IDLE),
    ],
    ids=["BreakerOpen", "QueueFull", "EmitterShutDown"],
)
def test_the_exceptions_survive_pickle_and_copy(exc):
    for back in (pickle.loads(pickle.dumps(exc)), copy.copy(exc)):
        assert type(back) is type(exc)
        assert str(back) == str(exc)
        for attr in ("retry_after", "reason", "trigger", "priority"):
            assert getattr(back, attr, None) == getattr(exc, attr, None)


# ----------------------------------------------------------------------
# Listeners.


@pytest.mark.xfail(
    strict=True,
    reason="finding: a listener that refers to its breaker (a closure, a bound method) makes a cycle through "
    "Rust that the GC cannot see: the breaker (and its ticker registration) is never freed",
)
def test_a_breaker_whose_listener_refers_to_it_is_collected():
    def build():
        b = Breaker(clock=ManualClock(), on_transition=lambda t: b.state)
        return weakref.ref(b)

    gone = build()
    gc.collect()
    assert gone() is None


def test_a_breaker_with_a_plain_listener_is_collected():
    gone = weakref.ref(Breaker(clock=ManualClock(), on_transition=lambda t: None))
    gc.collect()
    assert gone() is None


def test_a_listener_that_raises_is_counted_and_the_next_runs(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))

    def bad(t):
        raise ValueError("listener bug")

    def kb(t):
        raise KeyboardInterrupt

    b = Breaker(clock=ManualClock(), on_transition=[bad, kb, lambda t: seen.append("third")])
    b.trip_now()
    b.tick()
    assert seen == [ValueError, KeyboardInterrupt, "third"]
    assert b.snapshot().listener_panics == 2


def test_a_listener_that_calls_overrides_on_its_own_breaker_does_not_deadlock():
    rc, err = run_python(
        """
        from tailguard import Breaker, ManualClock
        seen = []
        def again(t):
            seen.append(t.to)
            if len(seen) < 50:
                (b.reset if str(t.to) == "open" else b.trip_now)()
        b = Breaker(clock=ManualClock(), on_transition=again)
        b.trip_now()
        b.tick()
        assert len(seen) >= 2, seen
        """,
        timeout=30,
    )
    assert rc == 0, err


def test_ticker_listeners_while_the_main_thread_overrides_builds_and_drops_breakers():
    rc, err = run_python(
        """
        import gc, time
        from tailguard import Breaker, BreakerOpen, Emitter
        calls = [0]
        def listener(t):
            calls[0] += 1
            time.sleep(0)
        fast = dict(window=0.001, base_backoff=0.001, max_backoff=0.002, on_transition=listener)
        breakers = [Breaker(**fast) for _ in range(4)]
        end = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < end:
            i += 1
            for b in breakers:
                b.trip_now(); b.snapshot(); b.state
                try:
                    with b.allow():
                        pass
                except BreakerOpen:
                    pass
                b.reset()
            extra = Breaker(**fast); extra.trip_now(); del extra
            e = Emitter(breakers[i % 4], bulkhead=2)
            e.emit_blocking(i, lambda t: t)
            del e
            if i % 50 == 0:
                gc.collect()
        assert calls[0] > 0
        import os; os._exit(0)  # the exit itself is another test's finding
        """,
        timeout=60,
    )
    assert rc == 0, err


def test_exit_with_a_gil_releasing_listener_on_the_ticker_thread_is_clean():
    code = """
        import time
        from tailguard import Breaker, BreakerOpen
        def log(t):
            time.sleep(0.01)  # I/O of any kind releases the GIL
        bs = [Breaker(window=0.001, trip_windows=1, latency_threshold=0.001, min_calls=1,
                      base_backoff=0.001, max_backoff=0.002, half_open_probes=1,
                      success_to_close=1, on_transition=log) for _ in range(16)]
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            for b in bs:
                try:
                    b.allow().record_latency(0.5, True)
                except BreakerOpen:
                    pass
        """
    for _ in range(3):
        rc, err = run_python(code)
        assert rc == 0, f"exit status {rc}: {err[-300:]}"


def test_exit_with_a_daemon_thread_in_overrides_is_clean():
    code = """
        import threading, time
        from tailguard import Breaker
        bs = [Breaker(window=0.001) for _ in range(8)]
        def churn():
            while True:
                for b in bs:
                    b.trip_now(); b.reset()
        threading.Thread(target=churn, daemon=True).start()
        time.sleep(0.3)
        """
    for _ in range(3):
        rc, err = run_python(code)
        assert rc == 0, f"exit status {rc}: {err[-300:]}"


def test_exit_with_a_daemon_thread_taking_permits_is_clean():
    rc, err = run_python(
        """
        import threading, time
        from tailguard import Breaker, BreakerOpen
        bs = [Breaker(window=0.001, on_transition=lambda t: None) for _ in range(8)]
        def churn():
            while True:
                for b in bs:
                    try:
                        with b.allow():
                            pass
                    except BreakerOpen:
                        pass
        threading.Thread(target=churn, daemon=True).start()
        time.sleep(0.3)
        """
    )
    assert rc == 0, err


# ----------------------------------------------------------------------
# The emitter.


def backlog(n=3):
    clock = ManualClock()
    b = Breaker(clock=clock, half_open_probes=1, success_to_close=1)
    e = Emitter(b, capacity=64, bulkhead=1, timeout=0.2, replay_attempts=2)
    b.trip_now()
    for i in range(n):
        e.emit_blocking(i, lambda t: t, Priority(i % 3))
    b.reset()
    return clock, b, e


@pytest.mark.xfail(
    strict=True,
    reason="finding: a replay cancelled after Emitter.shutdown() returned puts the trigger it was calling back at "
    "the head of the shut-down emitter (stats().pending stays True; only a second shutdown() finds it): "
    "the package has no shutdown that waits for the replay, and the call's drop uses keep_at_head",
)
async def test_a_replay_cancelled_after_shutdown_leaves_nothing_on_the_shut_down_emitter():
    clock, b, e = backlog()
    started = asyncio.Event()

    async def hang(t):
        started.set()
        await asyncio.Future()

    replay = asyncio.ensure_future(e.replay(hang))
    await started.wait()
    assert len(e.shutdown()) == 2
    replay.cancel()
    with pytest.raises(asyncio.CancelledError):
        await replay
    conserved(e, 3)
    assert not e.stats().pending, "a trigger queued on a shut-down emitter"


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_call_raising_base_exception_gives_its_slots_back(exc):
    e = Emitter(Breaker(clock=ManualClock()), timeout=1.0, bulkhead=1)

    def boom(t):
        raise exc()

    with pytest.raises(exc):
        e.emit_blocking("t", boom)

    async def aboom(t):
        raise exc()

    async def main():
        try:
            await e.emit("u", aboom)
        except BaseException as caught:  # asyncio turns some into CancelledError
            return caught

    try:
        asyncio.run(main())
    except BaseException:
        pass
    s = e.stats()
    assert (s.cancelled, s.bulkhead_in_flight, len(e)) == (2, 0, 0)
    conserved(e, 2)


async def test_a_call_raising_its_own_timeout_error_is_a_failure_not_a_timeout():
    for clock in (ManualClock(), None):
        e = Emitter(Breaker(clock=clock), timeout=1.0)

        async def own(t):
            raise TimeoutError("mine")

        out = await e.emit("t", own)
        assert out.reason.kind == "failed" and isinstance(out.reason.error, TimeoutError)
        conserved(e, 1)


def test_two_event_loops_in_two_threads_share_an_emitter_and_a_clock():
    clock = ManualClock()
    e = Emitter(Breaker(clock=clock), bulkhead=4, timeout=1.0)
    outs = []
    started = threading.Barrier(3)

    def loop(k):
        async def main():
            async def hang(t):
                await asyncio.Future()

            emits = [asyncio.ensure_future(e.emit((k, i), hang)) for i in range(2)]
            await turns()
            started.wait(10)
            outs.extend(await asyncio.gather(*emits))

        asyncio.run(main())

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    started.wait(10)
    clock.advance(1.0)
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert sorted(o.reason.kind for o in outs) == ["timed_out"] * 4
    conserved(e, 4)


def test_an_in_flight_emit_collected_mid_call_is_cancelled():
    e = Emitter(Breaker(clock=ManualClock()), bulkhead=1)
    begun = e._native.begin("t", Priority.ROUTINE)
    assert e.stats().bulkhead_in_flight == 1
    del begun
    gc.collect()
    s = e.stats()
    assert (s.cancelled, s.bulkhead_in_flight) == (1, 0)
    conserved(e, 1)


@pytest.mark.parametrize("bad", [5, -1, "CRITICAL", 1.0, 2**70, None])
def test_a_priority_that_is_not_one_is_refused_and_nothing_queued(bad):
    e = Emitter(Breaker(clock=ManualClock()))
    with pytest.raises((TypeError, ValueError)):
        e.enqueue("x", bad)
    with pytest.raises((TypeError, ValueError)):
        e.emit_blocking("x", lambda t: t, bad)
    assert len(e) == 0
    conserved(e, 0)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -1.0, 1e300])
def test_bad_seconds_are_refused_everywhere(seconds):
    clock = ManualClock()
    b = Breaker(clock=clock)
    for f in (
        lambda: b.allow().record_latency(seconds),
        lambda: b.allow().record_timeout(seconds),
        lambda: clock.advance(seconds),
        lambda: clock.set(seconds),
        lambda: Emitter(b, timeout=seconds),
        lambda: Breaker(latency_threshold=seconds),
    ):
        with pytest.raises(ValueError):
            f()


async def test_a_call_that_returns_after_being_cut_is_judged_alike_on_both_clocks():
    async def stubborn(t):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return "sent anyway"

    system = Emitter(Breaker(), timeout=0.05)
    on_system = await system.emit("a", stubborn)
    clock = ManualClock()
    manual = Emitter(Breaker(clock=clock), timeout=0.05)
    emit = asyncio.ensure_future(manual.emit("a", stubborn))
    await turns()
    clock.advance(0.05)
    await turns(6)
    on_manual = emit.result()
    assert on_system.delivered  # held: the system clock keeps the value
    assert (on_manual.delivered, len(manual)) == (True, 0), on_manual


def judged(b, clock):
    clock.advance(60)
    b.tick()
    t = b.snapshot().totals
    return t.calls, t.errors


def _in_a_permit_block(b):
    async def call():
        with b.allow():
            await asyncio.sleep(3600)

    return call


def _async_guarded(b):
    @b
    async def call():
        await asyncio.sleep(3600)

    return call


@pytest.mark.parametrize("guarded", [_in_a_permit_block, _async_guarded], ids=["with_allow", "async_decorator"])
async def test_a_cancelled_call_is_not_charged_to_the_consumer(guarded):
    clock = ManualClock()
    b = Breaker(clock=clock)
    task = asyncio.ensure_future(guarded(b)())
    await turns()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert judged(b, clock) == (0, 0)


async def test_a_registry_breaker_keeps_its_manual_clock_on_the_second_lookup():
    clock = ManualClock()
    registry = Registry()
    first = registry.breaker("pricing", clock=clock)
    again = registry.breaker("pricing")
    assert first.clock is clock
    assert again.clock is clock


async def test_an_emit_cancelled_while_its_cut_call_cleans_up_raises_cancelled_error():
    clock = ManualClock()
    e = Emitter(Breaker(clock=clock), timeout=0.5, bulkhead=1)
    cleaning = asyncio.Event()

    async def call(t):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cleaning.set()
            for _ in range(3):
                await asyncio.sleep(0)  # closing a connection, say
            raise

    emit = asyncio.ensure_future(e.emit("x", call))
    await turns()
    clock.advance(0.5)  # the deadline: the call is cut
    await asyncio.wait_for(cleaning.wait(), 5)
    assert emit.cancel(), "the emit is still running"
    try:
        out = await emit
    except asyncio.CancelledError:
        out = "cancelled"
    conserved(e, 1)
    assert out == "cancelled", f"the cancellation was swallowed: {out}"


def test_a_generator_function_cannot_be_guarded():
    # Its body runs after the call returns, out of the breaker's sight:
    # refused at decoration rather than judged wrong.
    b = Breaker(clock=ManualClock())

    def rows():
        yield 1

    async def events():
        yield 1

    for f in (rows, events):
        with pytest.raises(TypeError, match="generator"):
            b(f)


def test_a_breaker_built_after_fork_still_trips():
    rc, err = run_python(
        """
        import os, sys, time
        from tailguard import Breaker, BreakerOpen
        Breaker(window=0.01)  # the parent starts the ticker (any breaker, at import time say)
        def trips():
            b = Breaker(window=0.01, trip_windows=1, latency_threshold=0.001, min_calls=1)
            end = time.monotonic() + 1.0
            while time.monotonic() < end and str(b.state) == "closed":
                for _ in range(10):
                    try:
                        b.allow().record_latency(0.5, True)
                    except BreakerOpen:
                        pass
                time.sleep(0.01)
            return str(b.state) == "open"
        pid = os.fork()
        if pid == 0:
            os._exit(0 if trips() else 3)
        _, status = os.waitpid(pid, 0)
        assert trips(), "the parent's breaker did not trip either"
        print("child exit", os.waitstatus_to_exitcode(status), file=sys.stderr)
        os._exit(os.waitstatus_to_exitcode(status))
        """
    )
    assert rc == 0, f"the child's breaker never tripped (exit {rc}): {err[-300:]}"


def test_a_breaker_inherited_across_fork_is_judged_in_the_child():
    rc, err = run_python(
        """
        import os, time
        from tailguard import Breaker, BreakerOpen
        b = Breaker(window=0.01, trip_windows=1, latency_threshold=0.001, min_calls=1)
        pid = os.fork()
        if pid == 0:
            end = time.monotonic() + 1.0
            while time.monotonic() < end and str(b.state) == "closed":
                for _ in range(10):
                    try:
                        b.allow().record_latency(0.5, True)
                    except BreakerOpen:
                        pass
                time.sleep(0.01)
            os._exit(0 if str(b.state) == "open" else 3)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status))
        """
    )
    assert rc == 0, f"the inherited breaker never tripped in the child (exit {rc}): {err[-300:]}"


@pytest.mark.xfail(
    strict=True,
    reason="finding: one listener that blocks on the ticker thread (a slow log handler, a lock) stops every other "
    "breaker of the process from closing windows: 2 s of 500 ms calls and breaker B never trips (README: 'judges "
    "its windows on a background thread of its own')",
)
def test_a_listener_blocked_on_the_ticker_does_not_stop_another_breaker_tripping():
    rc, err = run_python(
        """
        import os, threading, time
        from tailguard import Breaker, BreakerOpen
        gate, entered = threading.Event(), threading.Event()
        def stuck(t):
            entered.set(); gate.wait(10)
        fast = dict(window=0.01, trip_windows=1, latency_threshold=0.001, min_calls=1)
        def slow_calls(b):
            for _ in range(10):
                try:
                    b.allow().record_latency(0.5, True)
                except BreakerOpen:
                    pass
        a = Breaker(on_transition=stuck, **fast)
        end = time.monotonic() + 5.0
        while not entered.is_set() and time.monotonic() < end:
            slow_calls(a); time.sleep(0.01)  # A trips on the ticker thread, its listener blocks there
        assert entered.is_set()
        b = Breaker(**fast)
        end = time.monotonic() + 2.0
        while time.monotonic() < end and str(b.state) == "closed":
            slow_calls(b); time.sleep(0.01)
        tripped = str(b.state) == "open"
        gate.set()
        os._exit(0 if tripped else 3)
        """
    )
    assert rc == 0, f"breaker B never tripped while A's listener blocked the ticker (exit {rc}): {err[-300:]}"


def test_an_attached_emitter_dropped_by_its_owner_is_released_by_remove():
    class Order:
        pass

    registry = Registry()
    e = Emitter(registry.breaker("pricing", clock=ManualClock()))
    registry.attach_emitter("pricing", e)
    order = Order()
    gone = weakref.ref(order)
    e.enqueue(order, Priority.CRITICAL)
    del order, e
    gc.collect()
    assert gone() is not None  # exported: the registry keeps it
    assert registry.remove("pricing") and not registry.remove("pricing")
    gc.collect()
    assert gone() is None, "a queued trigger outlives its emitter and its removal, reachable by no one"
