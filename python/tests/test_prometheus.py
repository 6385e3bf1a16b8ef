"""The registry and its Prometheus text exposition, parsed."""

from __future__ import annotations

import math
import re

import pytest

from tailguard import Breaker, Emitter, Priority, Registry, State

from conftest import close_window

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str):
    """``{(name, frozenset(labels)): value}`` and ``{family: type}``; every
    line is a comment or a sample (anything else fails the test)."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            types[family] = kind
        elif line.startswith("# HELP "):
            assert len(line.split(" ", 3)) == 4, line
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample: {line!r}"
            name, labels, value = m.groups()
            key = (name, frozenset(LABEL.findall(labels or "")))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = float(value)
    return samples, types


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


def test_breaker_series_follow_the_breaker(clock):
    r = Registry()
    pricing = r.breaker("pricing", clock=clock, min_calls=1, error_rate=1.0)
    search = r.breaker("search", clock=clock)
    assert len(r) == 2 and sorted(r.names()) == ["pricing", "search"]
    for ok in (True, True, False):
        pricing.allow().record(ok)
    close_window(pricing, clock)
    pricing.trip_now()
    search.force_open()
    try:
        search.allow()
    except Exception:
        pass

    samples, types = parse(r.prometheus_text())
    assert types["breaker_state"] == "gauge"
    assert types["breaker_calls_total"] == "counter"
    assert types["breaker_call_duration_seconds"] == "histogram"
    assert value(samples, "breaker_state", consumer="pricing") == 1  # open
    assert value(samples, "breaker_state", consumer="search") == 1
    assert value(samples, "breaker_trips_total", consumer="pricing") == 1
    assert value(samples, "breaker_calls_total", consumer="pricing") == 3
    assert value(samples, "breaker_errors_total", consumer="pricing") == 1
    assert value(samples, "breaker_mode", consumer="search", mode="forced_open") == 1
    assert value(samples, "breaker_mode", consumer="search", mode="normal") == 0
    assert value(samples, "breaker_rejected_total", consumer="search", reason="forced") == 1
    assert value(samples, "breaker_call_duration_seconds_count", consumer="pricing") == 3
    assert value(samples, "breaker_call_duration_seconds_bucket", consumer="pricing", le="+Inf") == 3
    assert math.isnan(value(samples, "breaker_latency_seconds", consumer="search", quantile="0.99"))

    clock.advance(1.0)
    pricing.allow().record(True)  # a probe: HALF_OPEN
    assert pricing.state == State.HALF_OPEN
    samples, _ = parse(r.prometheus_text())
    assert value(samples, "breaker_state", consumer="pricing") == 2


async def test_emitter_series_carry_the_consumer_label(clock, make_emitter):
    r = Registry()
    b = r.breaker("pricing", clock=clock)
    e = make_emitter(b, capacity=4)
    r.attach_emitter("pricing", e)

    async def ok(x):
        return x

    async def bad(x):
        raise OSError(x)

    await e.emit(1, ok)
    await e.emit(2, bad, Priority.CRITICAL)
    b.force_open()
    await e.emit(3, ok, Priority.IDLE)

    samples, types = parse(r.prometheus_text())
    assert value(samples, "breaker_emits_delivered_total", consumer="pricing") == 1
    assert value(samples, "breaker_emits_diverted_total", consumer="pricing", reason="failed") == 1
    assert value(samples, "breaker_emits_diverted_total", consumer="pricing", reason="open") == 1
    assert value(samples, "breaker_fallback_depth", consumer="pricing") == 2
    assert value(samples, "breaker_fallback_capacity", consumer="pricing") == 4
    assert value(samples, "breaker_fallback_class_depth", consumer="pricing", **{"class": "critical"}) == 1
    assert value(samples, "breaker_fallback_class_depth", consumer="pricing", **{"class": "idle"}) == 1
    assert value(samples, "breaker_emit_seconds_count", consumer="pricing") == 3
    assert types["breaker_emit_seconds"] == "histogram"
    e.shutdown()
    samples, _ = parse(r.prometheus_text())
    assert value(samples, "breaker_fallback_depth", consumer="pricing") == 0


def test_prefix_renames_every_series(clock):
    r = Registry()
    r.breaker("pricing", clock=clock)
    samples, _ = parse(r.prometheus_text(prefix="router_breaker_"))
    assert value(samples, "router_breaker_state", consumer="pricing") == 0
    assert all(name.startswith("router_breaker_") for name, _ in samples)
    with pytest.raises(ValueError, match="prefix"):
        r.prometheus_text(prefix="9lives-")


def test_registry_returns_the_same_breaker_by_name(clock):
    r = Registry()
    first = r.breaker("pricing", clock=clock, latency_threshold=0.2)
    again = r.breaker("pricing", latency_threshold=5.0)  # settings ignored the second time
    first.trip_now()
    assert again.state == State.OPEN
    assert again.snapshot().latency_threshold == 0.2
    assert len(r) == 1


def test_registry_lookup_keeps_the_manual_clock(clock):
    r = Registry()
    r.breaker("pricing", clock=clock)
    assert r.breaker("pricing").clock is clock


def test_registry_errors(clock):
    r = Registry()
    with pytest.raises(ValueError, match="window"):
        r.breaker("bad", window=-1.0)
    assert r.names() == []
    e = Emitter(Breaker(clock=clock))
    with pytest.raises(ValueError, match="nobody"):
        r.attach_emitter("nobody", e)
    with pytest.raises(TypeError):
        r.attach_emitter("x", object())
