"""The breaker's state machine, its trips, probes, backoff, overrides and
settings, driven by a ManualClock (``breaker.tick()`` closes windows)."""

from __future__ import annotations

import math
import pickle

import pytest

from tailguard import Breaker, BreakerOpen, Limits, Mode, Ramp, RelativeLatency, Snapshot, State, Transition

from conftest import close_window


def rejection(breaker: Breaker) -> BreakerOpen:
    with pytest.raises(BreakerOpen) as info:
        breaker.allow()
    return info.value


def slow_window(breaker: Breaker, clock, calls: int, slow: int, threshold: float) -> None:
    """One window of ``calls`` calls, ``slow`` of them over ``threshold``."""
    for i in range(calls):
        breaker.allow().record_latency(threshold * 3 if i < slow else threshold / 10, True)
    close_window(breaker, clock)


# ----------------------------------------------------------------------
# The state machine.


def test_full_cycle_closed_open_half_open_closed_and_back_to_open(clock):
    b = Breaker(clock=clock, base_backoff=1.0, max_backoff=8.0, success_to_close=2)
    assert b.state == State.CLOSED and b.mode == Mode.NORMAL
    b.trip_now()
    assert b.state == State.OPEN
    e = rejection(b)
    assert (e.reason, e.retry_after) == ("open", 1.0)

    clock.advance(1.0)
    p = b.allow()  # the backoff ran out: this call is the probe
    assert p.is_probe and b.state == State.HALF_OPEN
    p.record(True)
    assert b.state == State.HALF_OPEN  # one good probe of two
    b.allow().record(True)
    assert b.state == State.CLOSED
    assert b.snapshot().backoff_level == 0

    # Again, and this time the probe fails: straight back to OPEN.
    b.trip_now()
    clock.advance(1.0)
    p = b.allow()
    assert b.state == State.HALF_OPEN
    p.record(False)
    assert b.state == State.OPEN
    s = b.snapshot()
    assert (s.trip_count, s.backoff_level) == (3, 1)  # trip, trip, re-open
    assert s.generation == 6  # C>O, O>H, H>C, C>O, O>H, H>O


def test_a_slow_probe_reopens(clock):
    b = Breaker(clock=clock, latency_threshold=0.1)
    b.trip_now()
    clock.advance(1.0)
    b.allow().record_latency(0.5, True)  # succeeded, but slower than the threshold
    assert b.state == State.OPEN


# ----------------------------------------------------------------------
# The latency trip.


def test_latency_trip_needs_trip_windows_consecutive_breaching_windows(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, trip_windows=3, min_calls=20)
    for _ in range(2):
        slow_window(b, clock, calls=100, slow=50, threshold=0.1)
        assert b.state == State.CLOSED
    slow_window(b, clock, calls=100, slow=0, threshold=0.1)  # a clean window breaks the run
    for _ in range(2):
        slow_window(b, clock, calls=100, slow=50, threshold=0.1)
        assert b.state == State.CLOSED
    slow_window(b, clock, calls=100, slow=50, threshold=0.1)
    assert b.state == State.OPEN
    s = b.snapshot()
    assert s.trip_count == 1
    assert s.window.calls == 100 and s.window.slow == 50
    assert s.window.latency.p99 > 0.1


def test_latency_trip_is_the_p99_against_the_threshold_exactly(clock):
    # q = 0.99: a window breaches when MORE than 1% of its calls are slow.
    at_limit = Breaker(clock=clock, latency_threshold=0.1, trip_windows=1, min_calls=20)
    for _ in range(5):
        slow_window(at_limit, clock, calls=100, slow=1, threshold=0.1)
    assert at_limit.state == State.CLOSED
    assert at_limit.snapshot().totals.slow == 5

    over = Breaker(clock=clock, latency_threshold=0.1, trip_windows=1, min_calls=20)
    slow_window(over, clock, calls=100, slow=2, threshold=0.1)
    assert over.state == State.OPEN


def test_latency_at_the_threshold_is_not_slow(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, trip_windows=1, min_calls=10)
    for _ in range(10):
        b.allow().record_latency(0.05, True)
    close_window(b, clock)
    assert b.state == State.CLOSED and b.snapshot().window.slow == 0


def test_sparse_slow_calls_trip_over_trip_windows(clock):
    # Three slow calls a second: never min_calls in a window, still tripped
    # by the sequential test within trip_windows windows (and one more).
    b = Breaker(clock=clock, latency_threshold=0.1)
    windows = 0
    while b.state == State.CLOSED and windows < 10:
        for _ in range(3):
            b.allow().record_latency(0.3, True)
        close_window(b, clock)
        windows += 1
    assert b.state == State.OPEN
    assert 3 <= windows <= 4


# ----------------------------------------------------------------------
# The error trip.


def test_error_rate_trips_above_the_rate_with_min_calls(clock, ):
    seen = []
    b = Breaker(clock=clock, error_rate=0.5, min_calls=10, on_transition=seen.append)
    # 9 calls, all failed: below min_calls, not judged.
    for _ in range(9):
        b.allow().record(False)
    close_window(b, clock)
    assert b.state == State.CLOSED
    # The rolling span now holds 9 + 11 calls, 9 + 1 failed: 50%, not above.
    for i in range(11):
        b.allow().record(i != 0)
    close_window(b, clock)
    assert b.state == State.CLOSED
    # One more failure: 11 of 21, above 50%.
    b.allow().record(False)
    close_window(b, clock)
    assert b.state == State.OPEN
    assert [t.reason for t in seen] == ["error_rate"]


def test_error_rate_one_never_trips(clock):
    b = Breaker(clock=clock, error_rate=1.0, min_calls=1)
    for _ in range(5):
        for _ in range(50):
            b.allow().record(False)
        close_window(b, clock)
    assert b.state == State.CLOSED
    assert b.snapshot().totals.errors == 250


def test_failure_count_trips_at_the_count_within_its_span(clock):
    seen = []
    b = Breaker(clock=clock, failure_count=(3, 5.0), error_rate=1.0, on_transition=seen.append)
    for _ in range(2):
        b.allow().record(False)
    for _ in range(100):
        b.allow().record(True)
    close_window(b, clock)
    assert b.state == State.CLOSED
    b.allow().record(False)  # the third failure within 5 s
    close_window(b, clock)
    assert b.state == State.OPEN
    assert seen[-1].reason == "failure_count"


def test_failure_count_forgets_failures_outside_its_span(clock):
    b = Breaker(clock=clock, failure_count=(3, 2.0), error_rate=1.0)
    for _ in range(2):
        b.allow().record(False)
    for _ in range(3):
        close_window(b, clock)
    b.allow().record(False)  # only one failure within the last 2 s
    close_window(b, clock)
    assert b.state == State.CLOSED


# ----------------------------------------------------------------------
# Probes and backoff.


def test_half_open_probes_bounds_the_probes(clock):
    b = Breaker(clock=clock, half_open_probes=2, success_to_close=5, latency_threshold=0.1, probe_lease=1.0)
    b.trip_now()
    clock.advance(1.0)
    probes = [b.allow(), b.allow()]
    assert all(p.is_probe for p in probes)
    assert b.snapshot().probes_in_flight == 2
    clock.advance(0.05)
    e = rejection(b)
    assert e.reason == "probes_busy"
    # The round is decided by the end of the earliest probe's lease at the latest.
    assert e.retry_after == pytest.approx(0.95)
    assert b.snapshot().rejections.probes_busy == 1
    probes[0].record(True)  # a slot is free again
    third = b.allow()
    assert third.is_probe
    for p in (probes[1], third):
        p.record(True)
    assert b.snapshot().probes_in_flight == 0


def test_backoff_grows_from_base_to_max_across_failed_probes(clock):
    b = Breaker(clock=clock, base_backoff=0.5, max_backoff=3.0)
    b.trip_now()
    waits = []
    for _ in range(6):
        e = rejection(b)
        waits.append(e.retry_after)
        assert b.snapshot().next_probe_in == e.retry_after
        clock.advance(e.retry_after)
        b.allow().record(False)
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert b.snapshot().backoff_level == 6


def test_backoff_starts_again_from_base_after_a_clean_recovery(clock):
    b = Breaker(clock=clock, base_backoff=0.5, max_backoff=3.0, success_to_close=1)
    b.trip_now()
    for _ in range(3):
        clock.advance(rejection(b).retry_after)
        b.allow().record(False)
    assert rejection(b).retry_after == 3.0
    clock.advance(3.0)
    b.allow().record(True)
    assert b.state == State.CLOSED
    b.trip_now()
    assert rejection(b).retry_after == 0.5


def test_retry_after_counts_down_on_the_clock(clock):
    b = Breaker(clock=clock, base_backoff=2.0, max_backoff=2.0)
    b.trip_now()
    clock.advance(0.75)
    assert rejection(b).retry_after == pytest.approx(1.25)
    assert b.snapshot().open_for == pytest.approx(0.75)


# ----------------------------------------------------------------------
# Overrides and modes.


def test_force_open_rejects_with_no_retry_time_until_reset(clock):
    b = Breaker(clock=clock)
    b.force_open()
    assert (b.state, b.mode) == (State.OPEN, Mode.FORCED_OPEN)
    clock.advance(3600)
    e = rejection(b)
    assert (e.reason, e.retry_after) == ("forced_open", None)
    assert b.snapshot().rejections.forced == 1
    b.reset()
    assert (b.state, b.mode) == (State.CLOSED, Mode.NORMAL)
    b.allow().record(True)


def test_force_closed_admits_and_measures_but_never_trips(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, trip_windows=1, min_calls=10)
    b.force_closed()
    assert (b.state, b.mode) == (State.CLOSED, Mode.FORCED_CLOSED)
    for _ in range(3):
        slow_window(b, clock, calls=20, slow=20, threshold=0.1)
    b.trip_now()
    assert b.state == State.CLOSED
    s = b.snapshot()
    assert (s.totals.calls, s.totals.slow, s.trip_count) == (60, 60, 0)


def test_disable_admits_everything_and_measures_nothing(clock):
    b = Breaker(clock=clock, trip_windows=1, min_calls=1)
    b.disable()
    assert (b.state, b.mode) == (State.CLOSED, Mode.DISABLED)
    for _ in range(50):
        b.allow().record(False)
    close_window(b, clock)
    s = b.snapshot()
    assert (s.state, s.totals.calls, s.totals.errors) == (State.CLOSED, 0, 0)


def test_metrics_only_decides_but_never_rejects(clock):
    b = Breaker(clock=clock)
    b.metrics_only()
    assert b.mode == Mode.METRICS_ONLY
    b.trip_now()
    assert b.state == State.OPEN  # what it would do
    p = b.allow()  # ... and does not
    p.record(True)
    assert b.mode == Mode.METRICS_ONLY


def test_metrics_only_counts_the_calls_it_would_have_rejected(clock):
    b = Breaker(clock=clock)
    b.metrics_only()
    b.trip_now()
    b.allow().record(True)
    assert b.snapshot().shadow_rejections == 1


def test_trip_now_trips_only_a_closed_breaker(clock):
    seen = []
    b = Breaker(clock=clock, on_transition=seen.append)
    b.trip_now()
    b.trip_now()  # already OPEN: nothing
    assert b.snapshot().trip_count == 1
    assert [(t.to, t.reason) for t in seen] == [(State.OPEN, "manual_trip")]


def test_reset_clears_backoff_and_is_not_a_transition_when_already_normal(clock):
    seen = []
    b = Breaker(clock=clock, base_backoff=1.0, max_backoff=8.0, on_transition=seen.append)
    b.reset()
    assert seen == [] and b.snapshot().generation == 0
    b.trip_now()
    for _ in range(2):
        clock.advance(rejection(b).retry_after)
        b.allow().record(False)
    assert b.snapshot().backoff_level == 2
    b.reset()
    s = b.snapshot()
    assert (s.state, s.mode, s.backoff_level) == (State.CLOSED, Mode.NORMAL, 0)
    assert seen[-1].reason == "reset" and seen[-1].to == State.CLOSED


def test_reset_drops_the_window_in_progress_from_judgement(clock):
    b = Breaker(clock=clock, latency_threshold=0.1, trip_windows=1, min_calls=10)
    for _ in range(50):
        b.allow().record_latency(0.9, True)
    b.reset()
    close_window(b, clock)
    assert b.state == State.CLOSED and b.snapshot().window.calls == 0


@pytest.mark.parametrize(
    "override, mode",
    [("force_open", Mode.FORCED_OPEN), ("force_closed", Mode.FORCED_CLOSED),
     ("disable", Mode.DISABLED), ("metrics_only", Mode.METRICS_ONLY)],
)
def test_an_override_already_in_force_changes_nothing(clock, override, mode):
    seen = []
    b = Breaker(clock=clock, on_transition=seen.append)
    getattr(b, override)()
    getattr(b, override)()
    assert b.mode == mode
    assert len(seen) == 1 and seen[0].to_mode == mode
    assert b.snapshot().generation == 1


# ----------------------------------------------------------------------
# Settings.


@pytest.mark.parametrize(
    "settings, name",
    [
        (dict(latency_threshold=0), "latency_threshold"),
        (dict(latency_threshold=-0.1), "latency_threshold"),
        (dict(latency_threshold=math.nan), "latency_threshold"),
        (dict(latency_threshold=math.inf), "latency_threshold"),
        (dict(window=-1.0), "window"),
        (dict(window=0.0005), "window"),
        (dict(window=math.inf), "window"),
        (dict(quantile=0), "quantile"),
        (dict(quantile=1.5), "quantile"),
        (dict(trip_windows=0), "trip_windows"),
        (dict(trip_windows=256), "trip_windows"),
        (dict(error_rate=-0.1), "error_rate"),
        (dict(error_rate=1.1), "error_rate"),
        (dict(error_window=math.nan), "error_window"),
        (dict(min_calls=-1), "min_calls"),
        (dict(failure_count=(0, 1.0)), "failure_count"),
        (dict(base_backoff=-1), "base_backoff"),
        (dict(base_backoff=10.0, max_backoff=5.0), "base_backoff"),
        (dict(max_backoff=86401.0), "max_backoff"),
        (dict(half_open_probes=0), "half_open_probes"),
        (dict(success_to_close=256), "success_to_close"),
        (dict(probe_lease=0.01), "probe_lease"),
        (dict(flapping=(3, -1.0)), "flapping"),
    ],
)
def test_a_bad_value_is_a_value_error_naming_the_setting(settings, name):
    with pytest.raises(ValueError, match=name):
        Breaker(**settings)


@pytest.mark.parametrize(
    "settings, text",
    [
        (dict(bogus=1), "bogus"),
        (dict(latency_treshold=0.1), "latency_treshold"),
        (dict(window="1s"), "window"),
        (dict(failure_count=5), "failure_count"),
        (dict(on_transition=5), "on_transition"),
        (dict(on_transition=[print, 5]), "on_transition"),
        (dict(clock=object()), "clock"),
        (dict(trip_windows=2.5), "trip_windows"),
        (dict(min_calls="20"), "min_calls"),
        (dict(half_open_probes=True), "half_open_probes"),
    ],
)
def test_an_unknown_setting_or_a_wrong_type_is_a_type_error(settings, text):
    with pytest.raises(TypeError, match=text):
        Breaker(**settings)


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf, -math.inf])
def test_bad_seconds_anywhere_are_value_errors(clock, seconds):
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(seconds)
    b = Breaker(clock=clock)
    p = b.allow()
    with pytest.raises(ValueError, match="seconds"):
        p.record_latency(seconds, True)
    with pytest.raises(ValueError, match="seconds"):
        p.record_timeout(seconds)
    assert not p.recorded  # a bad value does not use the permit up
    p.record(True)
    assert clock.now() == 0.0


def test_the_settings_are_applied(clock):
    b = Breaker(clock=clock, name="pricing", latency_threshold=0.25, window=2.0)
    assert b.name == "pricing"
    assert b.clock is clock
    assert b.snapshot().latency_threshold == 0.25
    assert b.next_due() == 2.0
    assert repr(b) == '<tailguard.Breaker "pricing" closed>'
    assert Breaker().clock is None


# ----------------------------------------------------------------------
# Snapshots and transitions are plain values.


def test_snapshot_is_a_plain_frozen_value(clock):
    b = Breaker(clock=clock, trip_windows=1, min_calls=4, latency_threshold=0.1)
    for ok in (True, True, False, True):
        b.allow().record_latency(0.01, ok)
    b.allow()  # dropped without a verdict: cancelled
    close_window(b, clock)
    s = b.snapshot()
    assert isinstance(s, Snapshot)
    assert (s.totals.calls, s.totals.errors, s.totals.slow, s.totals.cancelled) == (4, 1, 0, 1)
    assert s.window.closed_at == 1.0 and s.uptime == 1.0
    assert s.state == "closed" and str(s.state) == "closed"
    with pytest.raises(AttributeError):
        s.state = State.OPEN  # frozen
    again = pickle.loads(pickle.dumps(s))
    assert again == s
    b.trip_now()
    assert s.state == State.CLOSED  # holds nothing of the breaker
    assert b.snapshot() != s


def test_snapshot_limits_are_the_settings_as_built(clock):
    b = Breaker(clock=clock, window=0.5, latency_threshold=0.05, quantile=0.9, trip_windows=3, min_calls=7,
                error_rate=0.25, error_window=1.2, failure_count=(4, 2.0))
    lim = b.snapshot().limits
    assert isinstance(lim, Limits)
    assert (lim.window, lim.latency_threshold, lim.trip_windows, lim.min_calls, lim.error_rate) == (
        0.5, 0.05, 3, 7, 0.25)
    assert lim.slow_fraction == pytest.approx(0.1)
    assert lim.error_window == 1.5  # rounded up to whole windows, as the breaker judges it
    assert lim.failure_count == (4, 2.0) and lim.relative_latency is None and lim.recovery_ramp is None
    rel = Breaker(clock=clock, relative_latency={"multiplier": 3.0, "warmup": 2}, recovery_ramp=4.0).snapshot().limits
    assert isinstance(rel.relative_latency, RelativeLatency)
    assert (rel.relative_latency.multiplier, rel.relative_latency.warmup) == (3.0, 2)
    assert rel.recovery_ramp == 4.0
    assert pickle.loads(pickle.dumps(rel)) == rel


def test_snapshot_shows_the_ramp_while_it_runs(clock):
    b = Breaker(clock=clock, recovery_ramp=4.0, success_to_close=1)
    assert b.snapshot().ramp is None
    b.trip_now()
    clock.advance(1.0)
    b.allow().record(True)  # the probe closes it: the ramp starts
    clock.advance(1.0)
    r = b.snapshot().ramp
    assert isinstance(r, Ramp)
    assert r.remaining == 3.0 and 0.0 < r.admitted < 1.0
    clock.advance(3.0)
    b.tick()
    assert b.snapshot().ramp is None


def test_transition_is_a_plain_value(clock):
    seen = []
    b = Breaker(clock=clock, on_transition=seen.append)
    clock.advance(0.5)
    b.force_open()
    (t,) = seen
    assert t == Transition(State.CLOSED, State.OPEN, Mode.NORMAL, Mode.FORCED_OPEN, 1, "forced_open", 0.5, False)
    assert pickle.loads(pickle.dumps(t)) == t


def test_a_clock_stepping_back_does_not_take_the_breaker_back(clock):
    b = Breaker(clock=clock, trip_windows=1, min_calls=1, error_rate=0.5)
    clock.advance(2.5)
    b.tick()
    assert (b.snapshot().uptime, b.next_due()) == (2.5, 0.5)
    clock.rewind(1.0)
    b.tick()
    assert (b.snapshot().uptime, b.next_due()) == (2.5, 0.5)  # its time stands still
    p = b.allow()
    clock.advance(0.25)
    p.record(False)  # a latency measured across the step: no negative time
    clock.advance(0.25)
    b.tick()
    s = b.snapshot()
    assert (s.state, s.totals.calls, s.totals.errors, s.window.closed_at) == (State.OPEN, 1, 1, 3.0)


def test_recovery_ramp_rejects_with_ramping_then_admits_all(clock):
    b = Breaker(clock=clock, recovery_ramp=4.0, success_to_close=1)
    b.trip_now()
    clock.advance(1.0)
    b.allow().record(True)  # the probe closes it: the ramp starts
    assert b.state == State.CLOSED
    e = rejection(b)
    assert (e.reason, e.retry_after) == ("ramping", 1.0)
    clock.advance(4.0)
    b.tick()
    for _ in range(100):
        b.allow().record(True)
    assert b.snapshot().rejections.ramping == 1


def test_track_in_flight_counts_hung_calls_as_slow(clock):
    b = Breaker(clock=clock, track_in_flight=True, latency_threshold=0.1, trip_windows=1, min_calls=5)
    hung = [b.allow() for _ in range(5)]
    close_window(b, clock)
    s = b.snapshot()
    assert (s.state, s.window.calls, s.window.slow) == (State.OPEN, 5, 5)
    untracked = Breaker(clock=clock, latency_threshold=0.1, trip_windows=1, min_calls=5)
    also_hung = [untracked.allow() for _ in range(5)]
    close_window(untracked, clock)
    assert (untracked.state, untracked.snapshot().window.calls) == (State.CLOSED, 0)
    del hung, also_hung


def test_flapping_is_flagged_on_the_reopen_that_crosses_the_limit(clock):
    seen = []
    b = Breaker(clock=clock, flapping=(2, 60.0), on_transition=seen.append)
    b.trip_now()
    for _ in range(3):
        clock.advance(b.snapshot().next_probe_in)
        b.allow().record(False)
    b.tick()
    assert [(t.to, t.flapping) for t in seen] == [
        (State.OPEN, False), (State.HALF_OPEN, False), (State.OPEN, False), (State.HALF_OPEN, False),
        (State.OPEN, False), (State.HALF_OPEN, False), (State.OPEN, True)]
    assert b.snapshot().flapping


def test_the_relative_rule_learns_a_baseline_and_trips_on_a_multiple_of_it(clock):
    b = Breaker(
        clock=clock,
        latency_threshold=1.0,  # the absolute rule out of the way (at the ceiling)
        quantile=0.9,  # a baseline observation is a pool of 10 / (1 - q) = 100 healthy calls
        trip_windows=1,
        min_calls=10,
        relative_latency={"multiplier": 2.0, "warmup": 3, "floor": 0.001},
    )
    assert b.latency_baseline is None

    def window(latency):
        for _ in range(200):
            b.allow().record_latency(latency, True)
        clock.advance(1.0)
        b.tick()

    for _ in range(5):
        window(0.010)  # healthy: 10 ms
    # Learned to the latency sketch's bucket: at most 9.05% above.
    assert 0.010 <= b.latency_baseline <= 0.010 * 1.0905
    window(0.015)  # 1.5x: under 2x the baseline
    assert b.state == State.CLOSED
    window(0.050)  # 5x
    assert b.state == State.OPEN
    assert b.snapshot().trip_count == 1
    b.reset_baseline()
    assert b.latency_baseline is None
    b.seed_baseline(0.020)
    assert b.latency_baseline == pytest.approx(0.020)


@pytest.mark.parametrize(
    "settings, error, text",
    [
        (dict(relative_latency={"multiplier": 0.5}), ValueError, "multiplier"),
        (dict(relative_latency={"k": 2}), TypeError, "unknown key"),
        (dict(relative_latency="yes"), TypeError, "relative_latency"),
        (dict(jitter="some"), ValueError, "jitter"),
        (dict(jitter=1.5), ValueError, "jitter"),
        (dict(on_cancel="ignore"), ValueError, "on_cancel"),
        (dict(shards=0), ValueError, "shards"),
    ],
)
def test_the_other_settings_are_checked(settings, error, text):
    with pytest.raises(error, match=text):
        Breaker(**settings)


def test_jitter_on_cancel_and_shards_are_accepted(clock):
    b = Breaker(clock=clock, jitter="full", on_cancel="failure", shards=4)
    p = b.allow()
    del p  # dropped without a verdict: a failure here
    clock.advance(60)
    b.tick()
    assert b.snapshot().totals.errors == 1
    assert Breaker(jitter=0.5, relative_latency=True).state == State.CLOSED
