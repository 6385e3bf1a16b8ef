"""Attacks on a guarded call's state (`GuardedCall`: cells under the GIL,
a permit that borrows its breaker): re-entry from what the call steps,
the collector and finalizers at the worst moments, shutdown with calls in
flight. After each, the breaker's accounting is whole: the probe slot
comes back, and the next probe is admitted."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap

import pytest

from tailguard import Breaker


def half_open(clock) -> Breaker:
    b = Breaker(clock=clock, half_open_probes=1)
    b.trip_now()
    clock.advance(1.0)
    return b


def next_probe_admitted(b: Breaker) -> bool:
    """The one probe slot is free: a permit is granted (and given back)."""
    if b.snapshot().probes_in_flight:
        return False
    b.allow().abandon()
    return True


class Step:
    """An awaitable whose iterator yields once, then finishes; it runs
    `hook(call)` on each of `send`, `throw` and `close` (the call that
    steps it: re-entry), and on being dropped."""

    def __init__(self, hook):
        self.hook, self.call, self.log, self.yielded = hook, None, [], False

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, _value):
        self.log.append("send")
        self.hook(self.call)
        if self.yielded:
            raise StopIteration("awaited")
        self.yielded = True
        return None

    def throw(self, typ, val=None, tb=None):
        self.log.append("throw")
        self.hook(self.call)
        raise typ if isinstance(typ, BaseException) else typ()

    def close(self):
        self.log.append("close")
        self.hook(self.call)

    def __del__(self):
        if self.call is not None:
            self.hook(self.call)
            self.call = None


def reenter(call):
    """What a hostile iterator does to the call stepping it: every entry
    point, each refused while the step runs, plus the read-only ones."""
    for enter in (lambda: call.send(None), call.__next__, lambda: call.throw(ValueError),
                  call.close, call.__await__):
        with pytest.raises(ValueError, match="already executing"):
            enter()
    assert call.cr_running
    assert call.cr_frame is None and call.cr_await is None
    repr(call)
    gc.collect()


def test_every_entry_point_is_refused_from_inside_a_step_and_the_call_goes_on(clock):
    b = half_open(clock)
    step = Step(reenter)

    @b
    async def send():
        return await step

    call = send()
    step.call = call
    assert call.send(None) is None  # the first step: the iterator re-entered, refused each time
    assert not call.cr_running and call.cr_frame is not None
    with pytest.raises(StopIteration) as stopped:
        call.send(None)  # re-entered again, then the await and the call end
    assert stopped.value.value == "awaited"
    step.call = None
    assert step.log == ["send", "send"]
    assert b.snapshot().probe_successes == 1  # the probe succeeded: one verdict
    assert next_probe_admitted(b)


def test_a_throw_into_an_iterator_that_re_enters_is_judged_once(clock):
    b = half_open(clock)
    step = Step(reenter)

    class Oops(Exception):
        pass

    @b
    async def send():
        await step

    call = send()
    step.call = call
    call.send(None)
    with pytest.raises(Oops):
        call.throw(Oops)
    step.call = None
    assert "throw" in step.log
    assert b.snapshot().probes_in_flight == 0
    assert b.state.name == "OPEN"  # the probe failed: one verdict, a failure


def test_the_awaitable_dropped_at_the_end_of_the_step_may_re_enter_and_collect(clock):
    """The coroutine's last reference goes while the step still runs (its
    finalizers may reach the call): refused, and the verdict still lands."""
    b = half_open(clock)
    seen = []

    def at_drop(call):
        seen.append(call.cr_running)
        with pytest.raises(ValueError, match="already executing"):
            call.close()
        gc.collect()

    @b
    async def send():
        holder = Step(at_drop)
        holder.call = this[0]
        del holder  # dropped inside the step
        return 1

    this = []
    call = send()
    this.append(call)
    with pytest.raises(StopIteration):
        call.send(None)
    this.clear()
    assert seen == [True]
    assert b.snapshot().probe_successes == 1  # the probe succeeded
    assert b.snapshot().probes_in_flight == 0


def test_a_call_cleared_by_the_collector_mid_flight_gives_its_probe_back(clock):
    """A suspended call in a cycle through its own awaitable's iterator:
    `__clear__` drops the coroutine (whose finalizer reaches the call),
    then the call itself goes; no verdict, the probe slot comes back."""
    b = half_open(clock)
    # (`call` is None once the collector has cleared the step's attributes.)
    step = Step(lambda call: call is None or (repr(call), call.cr_running))

    @b
    async def send():
        await step

    call = send()
    step.call = call  # call -> coroutine -> step -> call
    call.send(None)
    assert b.snapshot().probes_in_flight == 1
    del call, step
    gc.collect()
    assert next_probe_admitted(b)
    assert b.state.name == "HALF_OPEN"


@pytest.mark.parametrize("ending", ["exit", "loop_left_open"])
def test_the_interpreter_exits_cleanly_with_guarded_calls_in_flight(ending):
    """Calls suspended in tasks (and in cycles through their awaitables)
    when the interpreter shuts down: no crash, the exit code is the
    program's, nothing but asyncio's own warnings on stderr."""
    program = textwrap.dedent(f"""
        import asyncio, gc, sys
        from tailguard import Breaker
        b = Breaker(half_open_probes=1)

        class Hang:
            def __await__(self): return self
            def __iter__(self): return self
            def __next__(self): return None
            def send(self, v): return None
            def throw(self, t, v=None, tb=None): raise t if isinstance(t, BaseException) else t()
            def __del__(self):
                if getattr(self, "call", None) is not None:
                    repr(self.call); gc.collect()

        @b
        async def hang(h):
            await h

        async def main():
            loop = asyncio.get_running_loop()
            for _ in range(50):
                h = Hang(); c = hang(h); h.call = c
                loop.create_task(c)
            await asyncio.sleep(0)
            if {ending!r} == "exit":
                sys.exit(3)

        if {ending!r} == "exit":
            asyncio.run(main())
        else:
            loop = asyncio.new_event_loop()
            loop.run_until_complete(main())
            sys.stdout.write("left open\\n")
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == (3 if ending == "exit" else 0), done.stderr
    noise = [line for line in done.stderr.splitlines()
             if line and not line.startswith(("Task was destroyed but it is pending", "task: <Task pending"))]
    assert noise == []
