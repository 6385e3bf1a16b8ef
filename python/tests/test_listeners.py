"""Listeners: Python callables given every Transition in order, off the hot
path; one that raises is contained, reported and counted."""

from __future__ import annotations

import pytest

from tailguard import Breaker, Mode, State, Transition

from conftest import close_window


def test_listeners_get_every_transition_in_order(clock):
    seen = []
    b = Breaker(clock=clock, success_to_close=1, latency_threshold=0.1, trip_windows=1, min_calls=5,
                on_transition=seen.append)
    for _ in range(5):
        b.allow().record_latency(0.5, True)
    close_window(b, clock)  # trips at the close: delivered by tick
    clock.advance(1.0)
    b.allow().record(False)  # OPEN -> HALF_OPEN -> OPEN on the hot path
    b.tick()
    clock.advance(2.0)
    b.allow().record(True)  # OPEN -> HALF_OPEN -> CLOSED
    b.force_open()
    b.reset()
    assert all(isinstance(t, Transition) for t in seen)
    assert [(t.from_state, t.to, t.reason) for t in seen] == [
        (State.CLOSED, State.OPEN, "latency_breach"),
        (State.OPEN, State.HALF_OPEN, "backoff_elapsed"),
        (State.HALF_OPEN, State.OPEN, "probe_failed"),
        (State.OPEN, State.HALF_OPEN, "backoff_elapsed"),
        (State.HALF_OPEN, State.CLOSED, "probes_succeeded"),
        (State.CLOSED, State.OPEN, "forced_open"),
        (State.OPEN, State.CLOSED, "reset"),
    ]
    assert [t.generation for t in seen] == list(range(1, 8))
    assert [t.at for t in seen] == [1.0, 2.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert [(t.from_mode, t.to_mode) for t in seen[-2:]] == [
        (Mode.NORMAL, Mode.FORCED_OPEN), (Mode.FORCED_OPEN, Mode.NORMAL)]


def test_hot_path_transitions_wait_for_tick(clock):
    seen = []
    b = Breaker(clock=clock, success_to_close=1, on_transition=seen.append)
    b.trip_now()  # an override: delivered before it returns
    assert [t.to for t in seen] == [State.OPEN]
    clock.advance(1.0)
    b.allow().record(True)  # OPEN -> HALF_OPEN -> CLOSED, on the hot path
    assert b.state == State.CLOSED
    assert len(seen) == 1  # queued, not called from allow() or record()
    b.tick()
    assert [t.to for t in seen] == [State.OPEN, State.HALF_OPEN, State.CLOSED]


def test_several_listeners_each_get_everything_in_the_order_given(clock):
    calls = []
    b = Breaker(clock=clock, on_transition=[lambda t: calls.append(("a", t.generation)),
                                            lambda t: calls.append(("b", t.generation))])
    b.force_open()
    b.reset()
    assert calls == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_a_raising_listener_is_contained_counted_and_reported(clock, unraisable):
    after = []

    def bad(t):
        raise RuntimeError(f"listener failed on {t.reason}")

    b = Breaker(clock=clock, on_transition=[bad, after.append])
    b.force_open()  # the override returns: the exception does not reach its caller
    b.reset()
    b.trip_now()
    assert [t.reason for t in after] == ["forced_open", "reset", "manual_trip"]
    assert b.state == State.OPEN
    s = b.snapshot()
    assert s.listener_panics == 3
    assert [type(u.exc_value) for u in unraisable] == [RuntimeError] * 3
    assert str(unraisable[0].exc_value) == "listener failed on forced_open"
    assert unraisable[0].object is bad
    # The breaker goes on: calls, probes, closing.
    clock.advance(1.0)
    b.allow().record(True)
    b.tick()
    assert b.snapshot().listener_panics == 4
    assert [t.to for t in after] == [State.OPEN, State.CLOSED, State.OPEN, State.HALF_OPEN]


def test_a_listener_may_call_back_into_the_breaker(clock):
    seen = []

    def look(t):
        seen.append((t.to, b.state, b.mode, b.snapshot().generation))
        if t.reason == "forced_closed":
            b.reset()  # an override from inside a listener

    b = Breaker(clock=clock, on_transition=look)
    b.force_closed()
    b.tick()
    assert seen == [
        (State.CLOSED, State.CLOSED, Mode.FORCED_CLOSED, 1),
        (State.CLOSED, State.CLOSED, Mode.NORMAL, 2),
    ]
    assert b.mode == Mode.NORMAL


def test_a_listener_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match="not callable"):
        Breaker(on_transition=[print, "nope"])
