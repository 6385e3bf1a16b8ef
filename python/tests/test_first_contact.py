"""What a developer new to the package met first (the new-user trial of
issue 22), each pinned: what an emitter holds counts the trigger a failed
replay keeps at its head; emit_blocking refuses an async function; the
registry's lookups, listeners and attachments; errors that name their
cause."""

import asyncio

import pytest

from tailguard import Breaker, Emitter, ManualClock, Priority, Registry, Replayed


async def test_len_counts_the_trigger_a_failed_replay_keeps_at_the_head():
    e = Emitter(Breaker(clock=ManualClock()), capacity=8)
    for t in ("a", "b", "c"):
        e.enqueue(t, Priority.ROUTINE)

    async def down(t):
        raise ConnectionError("down")

    r = await e.replay(down)
    assert isinstance(r, Replayed) and r.stopped.kind == "failed"
    assert e.stats().pending and e.stats().queued == 2
    assert len(e) == 3 == len(e.drain(10))
    assert len(e) == 0 and bool(e)  # an empty emitter is still an emitter


def test_emit_blocking_refuses_an_async_function_and_judges_nothing():
    clock = ManualClock()
    b = Breaker(clock=clock)
    e = Emitter(b, bulkhead=1)

    async def send(t):
        return t

    with pytest.raises(TypeError, match="await emitter.emit"):
        e.emit_blocking("t", send)
    s = e.stats()
    assert (s.delivered, s.cancelled, s.bulkhead_in_flight) == (0, 1, 0)
    clock.advance(60)
    b.tick()
    assert b.snapshot().totals.calls == 0


def test_a_registry_lookup_is_the_same_breaker_and_refuses_a_listener_it_would_drop():
    r = Registry()
    clock = ManualClock()
    first = r.breaker("pricing", clock=clock, on_transition=print)
    assert r.breaker("pricing") is first
    assert r.breaker("pricing", window=5.0) is first  # other settings: ignored, as documented
    with pytest.raises(ValueError, match="already exists"):
        r.breaker("pricing", on_transition=print)


def test_attach_emitter_names_the_python_way_and_refuses_another_consumers_breaker():
    r = Registry()
    with pytest.raises(ValueError, match=r'registry.breaker\("pricing"'):
        r.attach_emitter("pricing", Emitter(Breaker(name="pricing")))
    r.breaker("pricing")
    r.breaker("audit")
    with pytest.raises(ValueError, match="not \"pricing\"'s"):
        r.attach_emitter("pricing", Emitter(r.breaker("audit")))
    r.attach_emitter("pricing", Emitter(r.breaker("pricing")))
    assert 'consumer="pricing"' in r.prometheus_text()


def test_errors_name_the_setting():
    with pytest.raises(TypeError, match="name"):
        Breaker(name=3)
    with pytest.raises(ValueError, match="capacity"):
        Emitter(Breaker(), capacity=0)


def test_a_guarded_function_shows_what_it_guards():
    b = Breaker(name="pricing")

    @b
    def quote(order):
        """Prices an order."""

    assert quote.__name__ == "quote" and quote.__doc__ == "Prices an order."
    assert repr(quote).startswith('<guarded by "pricing" <function')
