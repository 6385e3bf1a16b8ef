"""Threads: two Python threads on one breaker (nothing lost), and a
listener on the ticker thread while another thread calls overrides (no
deadlock). Only the ticker test waits on real time, in bounded loops."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from tailguard import Breaker, BreakerOpen, Emitter, Priority, State

from conftest import check_identities, close_window, Tracked

N = 20_000


def run_threads(target, count=2, timeout=60.0):
    errors = []

    def wrapped(i):
        try:
            target(i)
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    start = threading.Barrier(count)
    threads = [threading.Thread(target=lambda i=i: (start.wait(), wrapped(i)), daemon=True) for i in range(count)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: interleave the calls
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    assert errors == []


def test_two_threads_on_one_breaker_conserve_the_totals(clock):
    b = Breaker(clock=clock, error_rate=1.0, latency_threshold=0.1)

    def hammer(i):
        for k in range(N):
            p = b.allow()
            if k % 10 == 0:
                p.record(False)
            elif k % 10 == 1:
                p.record_latency(0.5, True)  # slow
            elif k % 10 == 2:
                p.abandon()
            elif k % 10 == 3:
                del p  # dropped: cancelled
            else:
                with p:
                    pass

    run_threads(hammer)
    close_window(b, clock)
    t = b.snapshot().totals
    per = N // 10
    assert (t.calls, t.errors, t.slow, t.cancelled) == (2 * (N - 2 * per), 2 * per, 2 * per, 2 * per)
    assert b.state == State.CLOSED


def test_two_threads_count_every_rejection(clock):
    b = Breaker(clock=clock, base_backoff=60.0, max_backoff=60.0)
    b.trip_now()
    rejected = [0, 0]

    def hammer(i):
        for _ in range(N):
            try:
                b.allow()
            except BreakerOpen as e:
                assert e.reason == "open"
                rejected[i] += 1

    run_threads(hammer)
    assert rejected == [N, N]
    assert b.snapshot().rejections.open == 2 * N


def test_two_threads_on_one_probe_slot_admit_one(clock):
    b = Breaker(clock=clock, half_open_probes=1)
    b.trip_now()
    clock.advance(1.0)
    held = []
    busy = [0, 0]

    def grab(i):
        for _ in range(N // 10):
            try:
                held.append(b.allow())
            except BreakerOpen as e:
                assert e.reason == "probes_busy"
                busy[i] += 1

    run_threads(grab)
    assert len(held) == 1 and held[0].is_probe
    assert sum(busy) == 2 * (N // 10) - 1
    assert b.snapshot().rejections.probes_busy == sum(busy)


def test_two_threads_emitting_keep_the_identities(clock):
    b = Breaker(clock=clock, error_rate=1.0)
    e = Tracked(Emitter(b, capacity=64))
    counts = [0, 0]

    def call(x):
        if x % 7 == 0:
            raise OSError(x)
        return x

    def hammer(i):
        for k in range(N // 4):
            e.emitter.emit_blocking(k, call, Priority(k % 3))
            counts[i] += 1

    run_threads(hammer)
    e.emits = sum(counts)
    s = e.stats()
    failed = 2 * len([k for k in range(N // 4) if k % 7 == 0])
    assert s.delivered == 2 * (N // 4) - failed
    assert s.diverted_failed + s.handed_back_full == failed
    e.shutdown()
    check_identities(e)


def test_a_listener_on_the_ticker_thread_while_overrides_run_does_not_deadlock():
    """A breaker on the system clock, on the ticker thread: its listener
    (which takes the GIL, and calls back into the breaker) runs on the
    ticker while the main thread keeps calling overrides (which wait for
    deliveries in progress). Bounded: the work must finish within 30 s."""
    main = threading.get_ident()
    threads = set()
    seen = []
    lock = threading.Lock()

    def listener(t):
        with lock:
            threads.add(threading.get_ident())
            seen.append(t.generation)
        b.snapshot()  # back into the breaker, from the ticker thread
        b.state

    b = Breaker(window=0.002, base_backoff=1e-6, max_backoff=1e-6, success_to_close=1,
                on_transition=listener)
    done = threading.Event()

    def churn():
        deadline = time.monotonic() + 30.0
        i = 0
        while time.monotonic() < deadline and (i < 300 or len(threads - {main, worker_id[0]}) == 0):
            b.trip_now()  # an override: delivered on this thread (or by a delivery in progress)
            while time.monotonic() < deadline:
                try:
                    b.allow().record(True)  # OPEN -> HALF_OPEN -> CLOSED on the hot path: the ticker delivers
                    break
                except BreakerOpen:
                    pass
            if i % 3 == 0:
                b.force_open()
                b.reset()
            if i % 50 == 0:
                time.sleep(0.005)  # a quiet spell: the ticker's window ends come
            i += 1
        done.set()

    worker_id = [None]
    worker = threading.Thread(target=lambda: (worker_id.__setitem__(0, threading.get_ident()), churn()),
                              daemon=True)
    worker.start()
    assert done.wait(60.0), "the override loop did not finish: deadlock with the ticker's listener?"
    worker.join(5.0)
    assert not worker.is_alive()
    # The last hot-path transitions reach the listener from the ticker within a few windows.
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        with lock:
            if seen and seen[-1] == b.snapshot().generation:
                break
        time.sleep(0.01)
    s = b.snapshot()
    with lock:
        assert seen == sorted(seen) and len(set(seen)) == len(seen)  # in order, each once
        assert len(seen) + s.events_lost == s.generation
        assert threads - {main, worker_id[0]}, "no transition was delivered on the ticker thread"
    assert s.listener_panics == 0


def test_breakers_with_listeners_dropped_while_the_ticker_delivers():
    """System-clock breakers with listeners built, tripped, probed and
    dropped in a loop while the ticker thread delivers their events: no
    deadlock (the drop never waits for the ticker with the GIL held)."""
    delivered = []
    finished = threading.Event()

    def churn():
        for i in range(200):
            b = Breaker(window=0.001, base_backoff=1e-6, max_backoff=1e-6, success_to_close=1,
                        on_transition=lambda t: delivered.append(t.generation))
            b.trip_now()
            try:
                b.allow().record(True)  # hot-path transitions: left for the ticker
            except BreakerOpen:
                pass
            if i % 20 == 0:
                time.sleep(0.003)
            del b
        finished.set()

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    assert finished.wait(60.0), "building and dropping breakers hung"
    worker.join(5.0)
    assert len(delivered) >= 200  # every trip_now at least, delivered before it returned
