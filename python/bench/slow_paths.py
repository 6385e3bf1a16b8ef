#!/usr/bin/env python3
"""Where the time of tailguard's slower ways goes, and what the prototypes
of a fix would save (evidence for the report; the package is not changed).

    python bench/slow_paths.py             # about 10 s

Each section is measured as bench.py measures (compiled loops, gc off,
interleaved rounds of short samples, medians and minimums in ns per
call). Sections:

1. ``Emitter.emit_blocking``: the outcome value. ``Delivered`` is a frozen
   dataclass, built from Rust on every delivered emit. Measured in two
   child processes (the native side looks the type up once), one with the
   shipped class, one with ``tailguard._types.Delivered`` replaced by a
   ``__slots__`` class before the first emit, alternating.
2. ``await Emitter.emit``: ``asyncio.timeout`` on every call, beside a
   prototype that keeps the emitter's deadlines in a FIFO with one loop
   timer (every call of one emitter has the same timeout, so deadlines
   come in admission order).
3. ``with breaker.allow():``: the ``with`` statement itself, on the
   native permit and on a pure-Python context manager.
4. ``@breaker`` on a coroutine: the shipped native awaitable, the
   ``async def`` wrapper it replaced, and the bare extra coroutine layer
   (no breaker at all), beside circuitbreaker.
5. ``@breaker`` on a method: ``Guarded.__get__`` imports ``types`` and
   looks up ``MethodType`` on every attribute access; beside it, the
   bound call with ``MethodType`` looked up once (what a ``__get__`` that
   caches it, as the ``py_type!`` lookups do, would come to, less the
   ``__get__`` call itself).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import gc
import itertools
import statistics
import subprocess
import sys
import textwrap
import time
from typing import Any, Dict, List

ROUNDS = 101
SAMPLE = 0.002


def compile_loop(stmt: str, names: Dict[str, Any], is_async: bool):
    params = "".join(f", {k}=_ns[{k!r}]" for k in names)
    kw = "async def" if is_async else "def"
    src = (f"{kw} inner(_n{params}):\n    _t0 = _timer()\n    for _i in _repeat(None, _n):\n"
           f"{textwrap.indent(stmt, ' ' * 8)}\n    return (_timer() - _t0) / _n * 1e9\n")
    ns: Dict[str, Any] = {"_ns": names, "_timer": time.perf_counter, "_repeat": itertools.repeat}
    exec(compile(src, "<slow_paths>", "exec"), ns)
    return ns["inner"]


def run(cases: Dict[str, str], names: Dict[str, Any], is_async: bool = False, rounds: int = ROUNDS) -> Dict[str, List[float]]:
    """Interleaved rounds of every case; ns per call, one sample a round."""
    loop = asyncio.new_event_loop() if is_async else None

    def once(f, n):
        return loop.run_until_complete(f(n)) if is_async else f(n)

    fns = {k: compile_loop(v, names, is_async) for k, v in cases.items()}
    ns_ = {}
    gc.disable()
    try:
        for k, f in fns.items():
            n = 100
            while once(f, n) * n < SAMPLE * 1e9 / 5:
                n *= 4
            ns_[k] = max(100, int(SAMPLE * 1e9 / once(f, n)))
            once(f, ns_[k])
        res: Dict[str, List[float]] = {k: [] for k in cases}
        keys = list(cases)
        for r in range(rounds):
            for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                res[k].append(once(fns[k], ns_[k]))
    finally:
        gc.enable()
        if loop is not None:
            loop.close()
    return res


def show(title: str, res: Dict[str, List[float]], versus: str = "") -> None:
    print(f"\n{title}")
    w = max(map(len, res))
    for k, v in res.items():
        ratio = ""
        if versus:
            ratio = f"  ÷ {versus}: {statistics.median(a / b for a, b in zip(v, res[versus])):.2f}×"
        print(f"  {k.ljust(w)}  median {statistics.median(v):7,.0f}  min {min(v):7,.0f}{ratio}")


# ----------------------------------------------------------------------
# 1. emit_blocking's outcome value


def child(kind: str) -> None:
    """One side of section 1, in its own process: prints median and min."""
    import tailguard._types as types

    if kind == "slots":
        class Delivered:
            __slots__ = ("value",)
            delivered = True

            def __init__(self, value):
                self.value = value

        types.Delivered = Delivered
    from tailguard import Breaker, Emitter

    em = Emitter(Breaker())
    assert type(em.emit_blocking(None, lambda t: None)).__qualname__.endswith("Delivered")
    res = run({"e": "emit(None, noop1)"}, {"emit": em.emit_blocking, "noop1": lambda t: None}, rounds=101)["e"]
    print(statistics.median(res), min(res))


def section_emit_blocking() -> None:
    from tailguard._types import Delivered

    class Slots:
        __slots__ = ("value",)

        def __init__(self, value):
            self.value = value

    show("1. the outcome value: building it alone (ns)",
         run({"Delivered(None), frozen dataclass (shipped)": "D(None)",
              "a __slots__ class": "S(None)"}, {"D": Delivered, "S": Slots}))
    out: Dict[str, List[float]] = {"emit_blocking, Delivered a frozen dataclass (shipped)": [],
                                   "emit_blocking, Delivered a __slots__ class": []}
    mins: Dict[str, List[float]] = {k: [] for k in out}
    for _ in range(10):
        for k, kind in zip(out, ("frozen", "slots")):
            p = subprocess.run([sys.executable, __file__, "--child", kind], capture_output=True, text=True, check=True)
            med, mn = map(float, p.stdout.split())
            out[k].append(med)
            mins[k].append(mn)
    print("   emit_blocking in alternating child processes (10 each; median of their medians, min of their mins):")
    for k in out:
        print(f"  {k}  median {statistics.median(out[k]):7,.0f}  min {min(mins[k]):7,.0f}")
    a, b = out.values()
    print(f"   shipped ÷ __slots__, median over the alternations: {statistics.median(x / y for x, y in zip(a, b)):.2f}×")


# ----------------------------------------------------------------------
# 2. await Emitter.emit: the per-call timeout

_CUT = object()


class FifoDeadlines:
    """The prototype: every call of one emitter has the same timeout, so the
    deadlines arrive in order; a FIFO and ONE loop timer (at the head's
    deadline) cut the overdue calls, a finished call marks its entry."""

    __slots__ = ("loop", "q", "handle")

    def __init__(self, loop):
        self.loop = loop
        self.q = collections.deque()
        self.handle = None

    def arm(self, task, remaining):
        entry = [task, self.loop.time() + remaining]
        self.q.append(entry)
        if self.handle is None:
            self.handle = self.loop.call_at(entry[1], self._fire)
        return entry

    def done(self, entry):
        entry[0] = None
        q = self.q
        while q and q[0][0] is None:
            q.popleft()

    def _fire(self):
        self.handle = None
        now, q = self.loop.time(), self.q
        while q and (q[0][0] is None or q[0][1] <= now):
            e = q.popleft()
            if e[0] is not None:
                e[0].cancel()
                e[0] = _CUT
        if q:
            self.handle = self.loop.call_at(q[0][1], self._fire)


def prototype_emitter(breaker, loop, **kw):
    from tailguard import Emitter, Priority
    from tailguard._native import _InFlight

    class FifoEmitter(Emitter):
        __slots__ = ("_dl",)

        async def emit(self, trigger, call, priority=Priority.ROUTINE):
            begun = self._native.begin(trigger, priority)
            if type(begun) is not _InFlight:
                return begun
            task = asyncio.current_task()
            entry = self._dl.arm(task, begun.remaining())
            try:
                value = await call(trigger)
            except asyncio.CancelledError:
                if entry[0] is _CUT and task.uncancel() == 0:
                    return begun.timed_out()
                self._dl.done(entry)
                begun.cancel()
                raise
            except Exception as e:
                self._dl.done(entry)
                return begun.failed(e)
            except BaseException:
                self._dl.done(entry)
                begun.cancel()
                raise
            self._dl.done(entry)
            return begun.delivered(value)

    em = FifoEmitter(breaker, **kw)
    em._dl = FifoDeadlines(loop)
    return em


async def anoop(*_a):
    return None


def section_emit() -> None:
    from tailguard import Breaker, Emitter

    # The prototype cuts a slow call and delivers a quick one.
    async def smoke():
        em = prototype_emitter(Breaker(), asyncio.get_running_loop(), timeout=0.05)

        async def slow(_t):
            await asyncio.sleep(1)

        cut, quick = await em.emit(1, slow), await em.emit(2, anoop)
        assert cut.reason.kind == "timed_out" and quick.delivered, (cut, quick)
        return em.stats()

    s = asyncio.run(smoke())
    assert s.diverted_timeout == 1 and s.delivered == 1, s

    loop_holder: Dict[str, Any] = {}

    class LazyProto:
        """Built on the loop the measurement runs on."""

        async def emit(self, t, call):
            em = loop_holder.get("em")
            if em is None:
                em = loop_holder["em"] = prototype_emitter(Breaker(), asyncio.get_running_loop())
            return await em.emit(t, call)

    show("2. await Emitter.emit and its timeout (ns)",
         run({"await anoop()": "await anoop()",
              "async with asyncio.timeout(1): await anoop()": "async with timeout(1.0):\n    await anoop()",
              "await Emitter.emit (shipped: asyncio.timeout)": "await e.emit(None, anoop)",
              "await prototype emit (FIFO deadlines, one timer)": "await p.emit(None, anoop)"},
             {"anoop": anoop, "timeout": asyncio.timeout, "e": Emitter(Breaker()), "p": LazyProto()},
             is_async=True),
         versus="await prototype emit (FIFO deadlines, one timer)")


# ----------------------------------------------------------------------
# 3. with breaker.allow()


def section_with() -> None:
    from tailguard import Breaker

    b = Breaker()
    used = b.allow()
    used.record()

    class PyCM:
        __slots__ = ()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    show("3. the with statement (ns)",
         run({"allow().record()": "allow().record()",
              "with allow(): pass": "with allow():\n    pass",
              "p = allow(); p.__enter__(); p.__exit__(None, None, None)":
                  "p = allow(); p.__enter__(); p.__exit__(None, None, None)",
              "with used_permit: pass (no verdict left to record)": "with used:\n    pass",
              "with pure_python_cm: pass": "with cm:\n    pass"},
             {"allow": b.allow, "used": used, "cm": PyCM()}))


# ----------------------------------------------------------------------
# 4. @breaker on a coroutine


def section_guard_async() -> None:
    import circuitbreaker
    from tailguard import Breaker

    def lean(breaker, func):
        allow = breaker.allow

        @functools.wraps(func)
        async def guarded(*args, **kwargs):
            permit = allow()
            try:
                result = await func(*args, **kwargs)
            except Exception:
                permit.record(False)
                raise
            except BaseException:
                permit.abandon()
                raise
            permit.record()
            return result

        return guarded

    def layer(func):
        async def guarded(*args, **kwargs):
            return await func(*args, **kwargs)

        return guarded

    show("4. @breaker on a coroutine (ns)",
         run({"await anoop()": "await anoop()",
              "an extra coroutine layer, no breaker": "await layer()",
              "tailguard @breaker (shipped: a native awaitable)": "await shipped()",
              "an async def wrapper over allow() and record() (what it replaced)": "await lean()",
              "circuitbreaker @circuit": "await cb()"},
             {"anoop": anoop, "layer": layer(anoop), "shipped": Breaker()(anoop), "lean": lean(Breaker(), anoop),
              "cb": circuitbreaker.circuit(anoop)},
             is_async=True),
         versus="tailguard @breaker (shipped: a native awaitable)")


# ----------------------------------------------------------------------
# 5. @breaker on a method


def section_method() -> None:
    import types

    import circuitbreaker
    import pybreaker
    from tailguard import Breaker

    tg_breaker, pb_breaker = Breaker(), pybreaker.CircuitBreaker()

    class Client:
        def plain(self):
            return None

        @tg_breaker
        def tg(self):
            return None

        @pb_breaker
        def pyb(self):
            return None

        @circuitbreaker.circuit
        def cb(self):
            return None

    c = Client()
    show("5. @breaker on a method (ns)",
         run({"c.plain()": "c.plain()",
              "c.tg(): tailguard (shipped)": "c.tg()",
              "the binding alone: Guarded.__get__(c, Client)": "get(c, Client)",
              "MethodType(guarded, c)(), MethodType looked up once": "MT(g, c)()",
              "c.pyb(): pybreaker": "c.pyb()",
              "c.cb(): circuitbreaker": "c.cb()"},
             {"c": c, "Client": Client, "get": Client.__dict__["tg"].__get__, "MT": types.MethodType,
              "g": Client.__dict__["tg"]}),
         versus="c.tg(): tailguard (shipped)")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
        return
    print(f"Python {sys.version.split()[0]}; ns per call, {ROUNDS} interleaved rounds of ~{SAMPLE * 1e3:g} ms samples")
    section_emit_blocking()
    section_emit()
    section_with()
    section_guard_async()
    section_method()


if __name__ == "__main__":
    main()
