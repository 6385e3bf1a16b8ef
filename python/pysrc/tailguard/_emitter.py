"""The emit path for asyncio: one ``Emitter`` per downstream consumer."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, List, Optional, Tuple, Union

from ._native import _Emitter, _InFlight
from ._types import Delivered, Diverted, EmitterStats, HandedBack, Priority, Replayed

__all__ = ["Emitter"]

Outcome = Union[Delivered, Diverted, HandedBack]


class Emitter:
    """One consumer's emit path: its breaker, an optional bulkhead, a timeout
    on every call, and a dead-letter queue of Python objects with three
    priority classes.

    ``await emitter.emit(trigger, call)`` never waits for a consumer the
    breaker has given up on: when the breaker rejects the call or the
    bulkhead is full, the trigger goes straight to the queue (or, if even
    the queue cannot take it, comes back to the caller) and ``call`` is not
    made. Otherwise ``call(trigger)`` is awaited for at most ``timeout``
    seconds; a call that fails or runs out of time is judged by the breaker
    and its trigger queued for replay. Every outcome is a value:
    ``Delivered``, ``Diverted`` (queued; a lower-class trigger it displaced
    is handed back in ``displaced``) or ``HandedBack`` (the caller keeps the
    trigger). Nothing is dropped silently.

    >>> import asyncio
    >>> from tailguard import Breaker, Emitter, Priority
    >>> pricing = Emitter(Breaker(name="pricing"), capacity=1024, bulkhead=64, timeout=0.2)
    >>> async def send(order):
    ...     return f"sent {order}"
    >>> asyncio.run(pricing.emit("order-1", send, Priority.CRITICAL))
    Delivered(value='sent order-1')

    A cancelled emit gives back its bulkhead slot and its breaker permit
    (a probe's slot too) with no verdict on the consumer, and is counted in
    ``stats().cancelled``. On a breaker built with a ``ManualClock`` the
    timeouts follow that clock (``clock.sleep``), so tests decide when a
    call runs out of time.
    """

    __slots__ = ("_native", "_breaker", "_clock")

    def __init__(
        self,
        breaker: Any,
        *,
        capacity: int = 1024,
        bulkhead: Optional[int] = None,
        timeout: float = 1.0,
        replay_attempts: Optional[int] = None,
    ) -> None:
        """``capacity``: the dead-letter queue's size (1 to 2,097,151);
        ``bulkhead``: the most calls in flight at once (``None``: no bound);
        ``timeout``: each call's budget in seconds; ``replay_attempts``:
        failed replays of one trigger before it is handed back (``None``:
        3)."""
        self._native = _Emitter(breaker, capacity, bulkhead, timeout, replay_attempts)
        self._breaker = breaker
        self._clock = breaker.clock

    @property
    def breaker(self) -> Any:
        """The consumer's breaker."""
        return self._breaker

    @property
    def timeout(self) -> float:
        """Each call's budget, in seconds."""
        return self._native.timeout

    async def emit(
        self,
        trigger: Any,
        call: Callable[[Any], Awaitable[Any]],
        priority: Priority = Priority.ROUTINE,
    ) -> Outcome:
        """Emits ``trigger`` through ``call`` (an async function of the
        trigger): breaker, bulkhead, then ``await call(trigger)`` within the
        timeout. Returns what became of the trigger."""
        begun = self._native.begin(trigger, priority)
        if type(begun) is not _InFlight:
            return begun
        try:
            value, cut = await self._call(call, trigger, begun.remaining_ns())
        except _NotAwaitable:
            begun.cancel()  # the caller's mistake: no verdict on the consumer
            raise
        except Exception as e:
            return begun.failed(e)
        except BaseException:
            # Cancelled (or interrupted): slots back, no verdict.
            begun.cancel()
            raise
        if cut:
            return begun.timed_out()
        return begun.delivered(value)

    async def _call(self, call: Callable[[Any], Awaitable[Any]], trigger: Any, budget_ns: int) -> Tuple[Any, bool]:
        """Awaits ``call(trigger)`` for at most ``budget_ns`` nanoseconds (on the
        breaker's manual clock if it has one): ``(value, False)``, or
        ``(None, True)`` if it was cut at the deadline. Its own exceptions
        (a ``TimeoutError`` of its own included) go on; a ``call`` that
        does not return an awaitable raises ``TypeError`` (the caller's
        mistake, not the consumer's failure)."""
        pending = call(trigger)
        if not hasattr(pending, "__await__"):
            raise _NotAwaitable(
                f"Emitter.emit: call({trigger!r}) returned {type(pending).__name__}, not an awaitable "
                "(pass an async function; use emit_blocking for a plain one)"
            )
        if self._clock is not None:
            # The deadline is fixed now, at admission, on the manual clock.
            return await _race(pending, self._clock._timer_ns(budget_ns))
        deadline = asyncio.timeout(budget_ns / 1e9)
        try:
            async with deadline:
                return await pending, False
        except TimeoutError:
            if deadline.expired():
                return None, True
            raise

    async def replay(self, call: Callable[[Any], Awaitable[Any]], max: int = 2**63 - 1) -> Replayed:
        """Replays up to ``max`` queued triggers through ``call``, if the
        breaker is CLOSED (or overridden to let calls through) and no other
        replay runs: highest class first, each class oldest first, each
        through the breaker, the bulkhead and the timeout. Stops at the
        first trigger not delivered, which stays at the head of the queue
        (nothing behind it overtakes it), unless that was its last attempt
        (``replay_attempts``): then it is handed back in
        ``Replayed.handed_back``. A cancelled replay keeps the trigger it
        was calling at the head, no attempt used. The caller bounds the
        rate: ``max`` per call, calls as often as it likes.

        Replay waits for the breaker to close, and a HALF_OPEN breaker
        closes on its probes: calls of live traffic. A router whose traffic
        to a consumer has stopped should probe it itself while it is
        HALF_OPEN (``with breaker.allow(): await health_check()``), or its
        queue waits for the next live call. Wait a moment after a failed
        replay before the next one: a breaker judges its windows before it
        trips, and each failed replay uses one of the head trigger's
        attempts."""
        run = self._native.replay_run(max)
        try:
            while (c := run.next()) is not None:
                try:
                    value, cut = await self._call(call, c.trigger, c.remaining_ns())
                except _NotAwaitable:
                    c.cancel()
                    raise
                except Exception as e:
                    run.failed(c, e)
                    continue
                except BaseException:
                    c.cancel()
                    raise
                if cut:
                    run.timed_out(c)
                else:
                    run.delivered(c)
        except BaseException:
            run.finish()
            raise
        return run.finish()

    def emit_blocking(
        self,
        trigger: Any,
        call: Callable[[Any], Any],
        priority: Priority = Priority.ROUTINE,
    ) -> Outcome:
        """As ``emit``, for a plain function called on this thread. A call
        cannot be cut here: one that returns after the timeout counts as
        timed out in the breaker (its success is still delivered, counted
        in ``overran``; its failure is diverted as timed out)."""
        begun = self._native.begin(trigger, priority)
        if type(begun) is not _InFlight:
            return begun
        try:
            value = call(trigger)
        except Exception as e:
            return begun.failed(e)
        except BaseException:
            begun.cancel()
            raise
        if hasattr(value, "__await__"):
            begun.cancel()  # the caller's mistake: no verdict on the consumer
            if hasattr(value, "close"):
                value.close()  # never awaited, on purpose: no warning
            raise TypeError(
                f"Emitter.emit_blocking: call({trigger!r}) returned an awaitable, so the consumer was never "
                "called (use `await emitter.emit(...)` for an async function)"
            )
        return begun.delivered(value)

    def enqueue(self, trigger: Any, priority: Priority = Priority.ROUTINE) -> Optional[Tuple[Any, Priority]]:
        """Queues a trigger by hand. Returns ``None``, or the ``(trigger,
        priority)`` of a lower-class trigger that gave way (the caller's to
        keep). Raises ``QueueFull`` or ``EmitterShutDown`` (the trigger in
        the exception) if it cannot be queued."""
        return self._native.enqueue(trigger, priority)

    def drain(self, max: int) -> List[Tuple[Any, Priority]]:
        """Takes up to ``max`` queued triggers out, highest class first, as
        ``(trigger, priority)`` pairs (counted in ``drained``)."""
        return self._native.drain(max)

    def shutdown(self, sink: Optional[Callable[[Any, Priority], Any]] = None) -> List[Tuple[Any, Priority]]:
        """Shuts the emitter down: from now on nothing is queued (an emit
        that is not delivered hands its trigger back). Every trigger still
        queued comes back, highest class first: returned as ``(trigger,
        priority)`` pairs, and passed to ``sink(trigger, priority)`` if one
        is given. If ``sink`` raises, the exception goes on with the pairs
        it did not take in its ``unsunk`` attribute: none is lost."""
        items = self._native.shutdown()
        if sink is not None:
            for i, (trigger, priority) in enumerate(items):
                try:
                    sink(trigger, priority)
                except BaseException as e:
                    e.unsunk = items[i:]
                    raise
        return items

    @property
    def is_shut_down(self) -> bool:
        return self._native.is_shut_down

    def __len__(self) -> int:
        """Triggers the emitter holds for replay: those in the dead-letter
        queue, and the one a failed replay keeps at its head (what
        ``drain`` and ``shutdown`` would return)."""
        return self._native.queue_len + int(self._native.stats().pending)

    def __bool__(self) -> bool:
        """An emitter is always true, empty or not (use ``len``)."""
        return True

    @property
    def capacity(self) -> int:
        """The dead-letter queue's capacity."""
        return self._native.queue_capacity

    def stats(self) -> EmitterStats:
        """The emitter's counters (see ``EmitterStats`` for the identities)."""
        return self._native.stats()

    def __repr__(self) -> str:
        return f"<tailguard.Emitter {self._breaker!r} queued={len(self)}/{self.capacity}>"


class _NotAwaitable(TypeError):
    """``call`` returned something that cannot be awaited."""


async def _race(call: Awaitable[Any], timer: "asyncio.Future[None]") -> Tuple[Any, bool]:
    """Awaits ``call`` against ``timer`` (a future of the manual clock):
    ``(value, False)`` if the call finished first (its exception goes on),
    ``(None, True)`` if the timer did (the call is then cancelled, and
    waited for). A cancellation of the awaiting task goes on, whenever it
    comes: the call is cancelled with it."""
    call_task = asyncio.ensure_future(call)
    try:
        await asyncio.wait((call_task, timer), return_when=asyncio.FIRST_COMPLETED)
        if call_task.done():
            return call_task.result(), False
        call_task.cancel()
        # Its clean-up runs to its end. A cancellation of this task raises
        # here, and goes on.
        await asyncio.wait((call_task,))
        if call_task.cancelled() or call_task.exception() is not None:
            return None, True
        # It ignored the cut and returned: delivered, late (as
        # asyncio.timeout's path does on the system clock): queueing it
        # would deliver it twice.
        return call_task.result(), False
    except BaseException:
        call_task.cancel()
        raise
    finally:
        timer.cancel()
