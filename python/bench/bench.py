#!/usr/bin/env python3
"""Per-call cost of a guarded no-op call: tailguard beside pybreaker,
circuitbreaker and aiobreaker, in one run.

    python bench/bench.py                  # the full table (about 40 s)
    python bench/bench.py --markdown out.md
    python bench/bench.py --check          # exit 1 unless the goals hold (~5 s)

It installs the peers it is missing (``pip install pybreaker circuitbreaker
aiobreaker``) into the interpreter it runs under, so run it with the venv's
python, after ``pip install ./python``.

Scenarios:

* ``1 thread``: one thread calls the guarded no-op ``n`` times.
* ``2 threads``: two threads call the SAME guarded function (one shared
  breaker) ``n`` times each, started together at a barrier; the figure is
  the wall time until both are done divided by ``n``: the per-call cost
  each thread sees (with the GIL they take turns, so the bare call is
  about twice its one-thread figure).
* ``methods``: one thread calls a decorated method of a class on an
  instance (the attribute access binds the guarded function every call).
* ``async``: one coroutine on one event loop (the default asyncio loop)
  awaits the guarded no-op coroutine ``n`` times.
* ``async 2 threads``: two threads, each with its own event loop, await
  the SAME guarded coroutine function (one shared breaker), started
  together as in ``2 threads`` (the emitter is not in it: an emitter
  belongs to one event loop).
* ``async value``: the same as ``async``, the coroutine returning a value (``1``)
  rather than ``None`` (a guarded coroutine that returns something else
  than ``None`` costs tailguard a ``StopIteration`` per call; ``None``
  does not).

Method (as ``timeit``): each sample is a compiled ``for`` loop of ``n``
calls with the garbage collector off, ``n`` calibrated so that a sample
takes about ``--sample-ms`` (2 ms; ten times that with two threads, so
that a sample spans several of the GIL's 5 ms switch intervals); every
case is warmed up first. Rounds are interleaved: each round takes one
sample of every case, in an order rotated round by round, so that noise
from other processes on the machine hits every library alike. Figures
are the median and the minimum over the rounds, in nanoseconds per call.
A ratio is the median over rounds of the ratio of the two samples taken
in the same round (paired: the two were taken milliseconds apart, so
drift of the machine cancels); the goals are also given as the ratio of
the minimums. Short samples and many rounds: on a shared 2-core machine
20 ms samples and 15 rounds gave paired ratios anywhere from 11× to 15×
for the same pair, 2 ms samples and 251 rounds 13.2× to 13.5×.

The guarded function is a true no-op (``def noop(): return None``, or
``async def``) in every library, each library used its idiomatic way, all
with their default settings, every call a success (the breakers stay
closed). The Emitter rows (default settings: no bulkhead) do more than a
breaker (the emitter's counters, an outcome value, and in asyncio a
timeout on every call: ``asyncio.timeout`` on the system clock, shown
alone as a baseline row); the peers have none of it.

pybreaker (1.4) has no native asyncio support; its Tornado path
(``call_async``) gets a row only if tornado is importable.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import itertools
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

PEERS = ("pybreaker", "circuitbreaker", "aiobreaker")

# The goals: tailguard at least this many times cheaper per call.
GOALS = {"pybreaker": 10.0, "circuitbreaker": 3.0}

SCENARIOS = ("1 thread", "2 threads", "methods", "async", "async value", "async 2 threads")


# ----------------------------------------------------------------------
# Setup


def ensure_peers(install: bool) -> None:
    """Imports the peers, installing the missing ones with pip first."""
    missing = []
    for name in PEERS:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return
    if not install:
        sys.exit(f"bench: missing {', '.join(missing)} (and --no-install was given)")
    if sys.prefix == sys.base_prefix:
        print(f"bench: note: {sys.executable} is not in a venv; pip installs into it anyway", file=sys.stderr)
    print(f"bench: installing {' '.join(missing)} from PyPI into {sys.prefix}", file=sys.stderr)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *missing]
    if subprocess.run(cmd).returncode != 0:
        sys.exit(f"bench: `{' '.join(cmd)}` failed")
    importlib.invalidate_caches()
    for name in missing:
        importlib.import_module(name)


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


# ----------------------------------------------------------------------
# The cases


def noop():
    return None


def noop1(_trigger):
    return None


async def anoop():
    return None


async def anoop1(_trigger):
    return None


async def aone():
    return 1


@dataclass
class Case:
    scenario: str
    library: str  # "baseline", "tailguard" or a peer's name
    way: str  # how it is called, shown in the table
    stmt: str  # one call, as it stands in the loop
    names: Dict[str, Any]
    is_async: bool = False
    primary: bool = False  # tailguard's decorator: what the ratios divide by
    n: int = 0
    inner: Optional[Callable] = None
    samples: List[float] = field(default_factory=list)  # ns per call, one a round


# Breakers and emitters whose state is checked after the run: every call
# a success, none rejected, none diverted (else a row measured something
# else than a guarded call).
WATCH: List[Tuple[str, Callable[[], bool]]] = []


def watch_breaker(label: str, b: Any) -> Any:
    WATCH.append((label, lambda: str(b.state) == "closed" and b.snapshot().totals.errors == 0
                  and b.snapshot().rejections.open == 0))
    return b


def watch_emitter(label: str, em: Any) -> Any:
    def ok() -> bool:
        st = em.stats()
        return st.delivered > 0 and st.diverted == 0 and st.handed_back == 0 and len(em) == 0

    WATCH.append((label, ok))
    return em


def watch_pybreaker(label: str, b: Any) -> Any:
    WATCH.append((label, lambda: b.current_state == "closed" and b.fail_counter == 0))
    return b


def compile_loop(stmt: str, names: Dict[str, Any], is_async: bool) -> Callable:
    """A timeit-style loop of ``stmt``, its names bound as locals."""
    params = "".join(f", {k}=_ns[{k!r}]" for k in names)
    kw = "async def" if is_async else "def"
    src = (
        f"{kw} inner(_it, _timer{params}):\n"
        f"    _t0 = _timer()\n"
        f"    for _i in _it:\n"
        f"{textwrap.indent(stmt, ' ' * 8)}\n"
        f"    return _t0, _timer()\n"
    )
    ns: Dict[str, Any] = {"_ns": names}
    exec(compile(src, f"<bench {stmt!r}>", "exec"), ns)
    return ns["inner"]


def sync_cases(scenario: str, check: bool) -> List[Case]:
    """The sync ways, each with its own breaker (shared by the two threads
    in the two-thread scenario)."""
    import circuitbreaker
    import pybreaker
    import tailguard

    cases = [Case(scenario, "baseline", "bare call: `noop()`", "noop()", {"noop": noop})]

    pb = watch_pybreaker(f"{scenario} pybreaker", pybreaker.CircuitBreaker())
    cases.append(Case(scenario, "pybreaker", "`@breaker`", "g()", {"g": pb(noop)}))
    pb2 = watch_pybreaker(f"{scenario} pybreaker.call", pybreaker.CircuitBreaker())
    cases.append(Case(scenario, "pybreaker", "`breaker.call(noop)`", "call(noop)", {"call": pb2.call, "noop": noop}))

    cases.append(Case(scenario, "circuitbreaker", "`@circuit`", "g()", {"g": circuitbreaker.circuit(noop)}))

    if not check:
        import aiobreaker

        ab = aiobreaker.CircuitBreaker()
        cases.append(Case(scenario, "aiobreaker", "`@breaker`", "g()", {"g": ab(noop)}))

    tg = watch_breaker(f"{scenario} tailguard @breaker", tailguard.Breaker())
    cases.append(Case(scenario, "tailguard", "`@breaker`", "g()", {"g": tg(noop)}, primary=True))
    if not check:
        tg2 = watch_breaker(f"{scenario} tailguard allow()", tailguard.Breaker())
        cases.append(
            Case(scenario, "tailguard", "`with breaker.allow():`", "with allow():\n    noop()",
                 {"allow": tg2.allow, "noop": noop})
        )
        em = watch_emitter(f"{scenario} tailguard emit_blocking", tailguard.Emitter(tailguard.Breaker()))
        cases.append(
            Case(scenario, "tailguard", "`Emitter.emit_blocking`", "emit(None, noop1)",
                 {"emit": em.emit_blocking, "noop1": noop1})
        )
    return cases


def method_cases() -> List[Case]:
    """The decorators on a method of a class, called on an instance (one
    thread): the attribute access binds the guarded function each call."""
    import circuitbreaker
    import pybreaker
    import tailguard

    pb_breaker = watch_pybreaker("methods pybreaker", pybreaker.CircuitBreaker())
    tg_breaker = watch_breaker("methods tailguard", tailguard.Breaker())

    class Client:
        def plain(self):
            return None

        @pb_breaker
        def pyb(self):
            return None

        @circuitbreaker.circuit
        def cb(self):
            return None

        @tg_breaker
        def tg(self):
            return None

    c = Client()
    s = "methods"
    return [
        Case(s, "baseline", "bare call: `client.plain()`", "c.plain()", {"c": c}),
        Case(s, "pybreaker", "`@breaker` on a method", "c.pyb()", {"c": c}),
        Case(s, "circuitbreaker", "`@circuit` on a method", "c.cb()", {"c": c}),
        Case(s, "tailguard", "`@breaker` on a method", "c.tg()", {"c": c}, primary=True),
    ]


def async_cases(s: str = "async") -> List[Case]:
    import aiobreaker
    import circuitbreaker
    import tailguard

    if s in ("async 2 threads", "async value"):
        # The decorator rows only (an emitter belongs to one event loop),
        # on the no-op coroutine or on one returning 1.
        fn, what = (aone, " returning 1") if s == "async value" else (anoop, "")
        way = f"`@breaker` on a coroutine{what}"
        tg = watch_breaker(f"{s} tailguard @breaker", tailguard.Breaker())
        return [
            Case(s, "baseline", f"bare call: `await {fn.__name__}()`", "await f()", {"f": fn}, is_async=True),
            Case(s, "circuitbreaker", f"`@circuit` on a coroutine{what}", "await g()",
                 {"g": circuitbreaker.circuit(fn)}, is_async=True),
            Case(s, "aiobreaker", way, "await g()", {"g": aiobreaker.CircuitBreaker()(fn)}, is_async=True),
            Case(s, "tailguard", way, "await g()", {"g": tg(fn)}, is_async=True, primary=True),
        ]
    cases = [
        Case(s, "baseline", "bare call: `await anoop()`", "await anoop()", {"anoop": anoop}, is_async=True),
        Case(s, "baseline", "bare call under `asyncio.timeout(1)`",
             "async with timeout(1.0):\n    await anoop()", {"anoop": anoop, "timeout": asyncio.timeout},
             is_async=True),
    ]
    pb_row = pybreaker_async_case()
    if pb_row is not None:
        cases.append(pb_row)
    cases.append(Case(s, "circuitbreaker", "`@circuit` on a coroutine", "await g()",
                      {"g": circuitbreaker.circuit(anoop)}, is_async=True))
    ab = aiobreaker.CircuitBreaker()
    cases.append(Case(s, "aiobreaker", "`@breaker` on a coroutine", "await g()", {"g": ab(anoop)}, is_async=True))
    tg = watch_breaker("async tailguard @breaker", tailguard.Breaker())
    cases.append(Case(s, "tailguard", "`@breaker` on a coroutine", "await g()", {"g": tg(anoop)},
                      is_async=True, primary=True))
    em = watch_emitter("async tailguard emit", tailguard.Emitter(tailguard.Breaker()))
    cases.append(Case(s, "tailguard", "`await Emitter.emit`", "await emit(None, anoop1)",
                      {"emit": em.emit, "anoop1": anoop1}, is_async=True))
    return cases


PYBREAKER_ASYNC_NOTE: List[str] = []


def pybreaker_async_case() -> Optional[Case]:
    """pybreaker has no native asyncio support (as of 1.4): its async path
    is Tornado's ``gen.coroutine`` (``call_async``, needs tornado). It is
    measured only if the installed version has a native coroutine path or
    tornado is importable."""
    import pybreaker

    v = version("pybreaker")
    pb = pybreaker.CircuitBreaker()
    g = pb(anoop)
    if asyncio.iscoroutinefunction(g):
        return Case("async", "pybreaker", "`@breaker` on a coroutine", "await g()", {"g": g}, is_async=True)
    try:
        import tornado  # noqa: F401
    except ImportError:
        PYBREAKER_ASYNC_NOTE.append(
            f"pybreaker {v} has no native asyncio support: `@breaker` on a coroutine function returns a "
            "plain function (the breaker records the coroutine object's creation, not the await), and "
            "its only async path is Tornado's `gen.coroutine` (`call_async`), which needs tornado "
            "(not installed): no pybreaker row in the async table."
        )
        return None
    PYBREAKER_ASYNC_NOTE.append(
        f"pybreaker {v} has no native asyncio support; its row is `call_async` over Tornado's "
        f"`gen.coroutine` (tornado {version('tornado')}), on the asyncio loop."
    )
    return Case("async", "pybreaker", "`call_async` (Tornado)", "await call_async(anoop)",
                {"call_async": pb.call_async, "anoop": anoop}, is_async=True)


# ----------------------------------------------------------------------
# Measuring


class Runner:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def close(self) -> None:
        self.loop.close()

    def sample(self, case: Case, n: int) -> float:
        """Seconds per call (per thread) of one loop of ``n`` calls."""
        it = itertools.repeat(None, n)
        timer = time.perf_counter
        gc_was = gc.isenabled()
        gc.disable()
        try:
            if case.scenario.endswith("2 threads"):
                return self._two_threads(case, n)
            if case.is_async:
                t0, t1 = self.loop.run_until_complete(case.inner(it, timer))
                return (t1 - t0) / n
            t0, t1 = case.inner(it, timer)
            return (t1 - t0) / n
        finally:
            if gc_was:
                gc.enable()

    @staticmethod
    def _two_threads(case: Case, n: int) -> float:
        barrier = threading.Barrier(2)
        spans: List[Tuple[float, float]] = []
        errors: List[BaseException] = []

        def work() -> None:
            loop = asyncio.new_event_loop() if case.is_async else None  # made before the start line
            try:
                barrier.wait()
                if loop is not None:
                    spans.append(loop.run_until_complete(case.inner(itertools.repeat(None, n), time.perf_counter)))
                else:
                    spans.append(case.inner(itertools.repeat(None, n), time.perf_counter))
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
            finally:
                if loop is not None:
                    loop.close()

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return (max(s[1] for s in spans) - min(s[0] for s in spans)) / n

    def calibrate(self, case: Case, target: float) -> None:
        if case.scenario.endswith("2 threads"):
            target *= 10
        """Warms the case up and picks ``n`` so that a sample takes about
        ``target`` seconds."""
        n = 100
        while True:
            per_call = self.sample(case, n)  # the wall time per call, in both scenarios
            if per_call * n >= target / 5 or n >= 10**8:
                break
            n *= 4
        case.n = max(100, int(target / per_call))
        self.sample(case, case.n)  # one full-size warm-up sample


def measure(cases: List[Case], rounds: int, target: float, progress: bool) -> None:
    runner = Runner()
    try:
        for c in cases:
            c.inner = compile_loop(c.stmt, c.names, c.is_async)
            runner.calibrate(c, target)
        k = len(cases)
        for r in range(rounds):
            gc.collect()
            shift = r % k  # rotate the order round by round
            for c in cases[shift:] + cases[:shift]:
                c.samples.append(runner.sample(c, c.n) * 1e9)
            if progress:
                print(f"\rbench: round {r + 1}/{rounds}", end="", file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)
    finally:
        runner.close()


# ----------------------------------------------------------------------
# Reporting


def paired_ratio(a: Case, b: Case) -> float:
    """Median over rounds of a's sample / b's sample of the same round."""
    return statistics.median(x / y for x, y in zip(a.samples, b.samples))


def min_ratio(a: Case, b: Case) -> float:
    """a's fastest sample / b's fastest sample: the least disturbed reading
    (other processes only ever add time), as ``timeit`` advises."""
    return min(a.samples) / min(b.samples)


def goal_ratios(cases: List[Case], peer: str, t: Case) -> Optional[Tuple[float, float]]:
    """The peer's cheapest way ÷ tailguard's way ``t``: (paired median, of
    the minimums), or None if the peer has no row here."""
    ways = [c for c in cases if c.library == peer and c.scenario == t.scenario]
    if not ways:
        return None
    return min(paired_ratio(w, t) for w in ways), min(min_ratio(w, t) for w in ways)


def verdict(r: Tuple[float, float], goal: float) -> str:
    """By the paired median; the minimums are a second opinion."""
    if r[0] >= goal:
        return "met" if r[1] >= goal else "met (mins: not)"
    return "NOT met (mins: met)" if r[1] >= goal else "NOT met"


def fmt_ns(x: float) -> str:
    return f"{x:,.0f}"


def fmt_ratio(x: float) -> str:
    return f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"


@dataclass
class Table:
    title: str
    header: List[str]
    rows: List[List[str]]
    align: List[str]  # "l" or "r" per column
    notes: List[str] = field(default_factory=list)


def tables(cases: List[Case]) -> List[Table]:
    out = []
    goal_rows = []
    for s in SCENARIOS:
        sc = [c for c in cases if c.scenario == s]
        if not sc:
            continue
        base = next(c for c in sc if c.library == "baseline")
        tg = next(c for c in sc if c.primary)
        base_med = statistics.median(base.samples)
        rows = []
        for c in sc:
            med = statistics.median(c.samples)
            rows.append([
                c.library,
                c.way,
                fmt_ns(med),
                fmt_ns(min(c.samples)),
                fmt_ns(med - base_med) if c is not base else "",
                fmt_ratio(paired_ratio(c, tg)),
            ])
        per = "per call per thread" if s.endswith("2 threads") else "per call"
        out.append(Table(
            f"{s}: ns {per} (median and min of {len(tg.samples)} rounds)",
            ["library", "way", "median ns", "min ns", "over bare call", "÷ tailguard @breaker"],
            rows,
            ["l", "l", "r", "r", "r", "r"],
        ))
        # The goals, for each of tailguard's ways: each peer's cheapest way
        # against it (the conservative reading).
        for t in (c for c in sc if c.library == "tailguard"):
            row = [s, t.way]
            for peer, goal in GOALS.items():
                r = goal_ratios(sc, peer, t)
                row += ["n/a", "n/a", "–"] if r is None else [fmt_ratio(r[0]), fmt_ratio(r[1]), verdict(r, goal)]
            goal_rows.append(row)
    out.append(Table(
        "Goals: how many times cheaper tailguard is per call (the peer's cheapest way ÷ tailguard's way: "
        "median of the paired ratios, and ratio of the minimums)",
        ["scenario", "tailguard way", "pybreaker ÷", "(mins)", "≥ 10×", "circuitbreaker ÷", "(mins)", "≥ 3×"],
        goal_rows,
        ["l", "l", "r", "r", "l", "r", "r", "l"],
    ))
    return out


def render_text(ts: List[Table], preamble: List[str]) -> str:
    lines = list(preamble)
    for t in ts:
        lines += ["", t.title]
        t = Table(t.title, t.header, [[c.replace("`", "") for c in r] for r in t.rows], t.align)
        widths = [max(len(r[i]) for r in [t.header] + t.rows) for i in range(len(t.header))]

        def line(cells: List[str]) -> str:
            return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, t.align))

        lines.append(line(t.header))
        lines.append("  ".join("-" * w for w in widths))
        lines += [line(r) for r in t.rows]
    return "\n".join(lines) + "\n"


def render_markdown(ts: List[Table], preamble: List[str]) -> str:
    lines = [p if p else "" for p in preamble]
    for t in ts:
        lines += ["", f"**{t.title}**", ""]
        lines.append("| " + " | ".join(t.header) + " |")
        lines.append("|" + "|".join("---:" if a == "r" else "---" for a in t.align) + "|")
        for r in t.rows:
            lines.append("| " + " | ".join(r) + " |")
    return "\n".join(lines) + "\n"


def preamble(args: argparse.Namespace, cases: List[Case], elapsed: float) -> List[str]:
    libs = ", ".join(f"{d} {version(d)}" for d in ("tailguard",) + PEERS)
    lines = [
        f"Python {platform.python_version()} ({platform.python_implementation()}), {libs}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end; "
        f"{args.rounds} interleaved rounds of ~{args.sample_ms:g} ms samples (two threads: "
        f"~{10 * args.sample_ms:g} ms), {elapsed:.1f} s in all.",
    ]
    lines += [""] + PYBREAKER_ASYNC_NOTE if PYBREAKER_ASYNC_NOTE else []
    if any("Emitter.emit" in c.way for c in cases):
        lines += ["", "The emitter rows (no bulkhead: the default) also keep the emitter's counters and build an outcome value, and the "
                      "async one an `asyncio.timeout` per call (its cost alone is the second baseline row); the "
                      "peers do none of this."]
    return lines


# ----------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 151; 251 with --check)")
    p.add_argument("--sample-ms", type=float, default=None,
                   help="milliseconds per sample (default 2; ten times that with two threads)")
    p.add_argument("--scenario", action="append", choices=SCENARIOS,
                   help="only this scenario (repeatable; default all)")
    p.add_argument("--markdown", nargs="?", const="-", metavar="PATH",
                   help="also write the tables as markdown to PATH (stdout if no PATH)")
    p.add_argument("--check", action="store_true",
                   help="one thread only: exit 1 unless tailguard's @breaker is at least 10× cheaper than "
                        "pybreaker (its cheaper way) and 3× cheaper than circuitbreaker (paired medians)")
    p.add_argument("--no-install", action="store_true", help="do not pip-install missing peers")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 251 if args.check else 151
    if args.sample_ms is None:
        args.sample_ms = 2.0
    if args.rounds < 1 or args.sample_ms <= 0:
        p.error("--rounds and --sample-ms must be positive")

    try:
        import tailguard  # noqa: F401
    except ImportError:
        sys.exit("bench: tailguard is not importable here: `pip install ./python` into this interpreter first")
    ensure_peers(not args.no_install)

    start = time.perf_counter()
    if args.check:
        cases = sync_cases("1 thread", check=True)
    else:
        scen = args.scenario or list(SCENARIOS)
        cases = []
        for s in SCENARIOS:
            if s in scen:
                if s.startswith("async"):
                    cases += async_cases(s)
                elif s == "methods":
                    cases += method_cases()
                else:
                    cases += sync_cases(s, check=False)
    measure(cases, args.rounds, args.sample_ms / 1e3, progress=not args.quiet and sys.stderr.isatty())
    broken = [label for label, ok in WATCH if not ok()]
    if broken:
        print(f"bench: these did not stay closed with every call a success: {', '.join(broken)}", file=sys.stderr)
        return 2
    ts = tables(cases)
    pre = preamble(args, cases, time.perf_counter() - start)
    sys.stdout.write(render_text(ts, pre))
    if args.markdown:
        md = render_markdown(ts, pre)
        if args.markdown == "-":
            sys.stdout.write("\n" + md)
        else:
            with open(args.markdown, "w", encoding="utf-8") as f:
                f.write(md)
            print(f"bench: markdown written to {args.markdown}", file=sys.stderr)

    if args.check:
        # Judged by the paired median, as the table; the minimums printed beside it.
        tg = next(c for c in cases if c.primary)
        failed = []
        for peer, goal in GOALS.items():
            r = goal_ratios(cases, peer, tg)
            assert r is not None
            ok = r[0] >= goal
            print(f"check: {peer} ÷ tailguard @breaker = {r[0]:.2f}× (paired median; {r[1]:.2f}× by the minimums), "
                  f"goal ≥ {goal:g}×: {'ok' if ok else 'FAILED'}")
            if not ok:
                failed.append(peer)
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
