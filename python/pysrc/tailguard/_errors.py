"""The exceptions tailguard raises."""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["BreakerOpen", "PermitUsed", "QueueFull", "EmitterShutDown"]


class BreakerOpen(Exception):
    """The breaker rejected the call: it was not made.

    ``retry_after`` is the number of seconds until the breaker may let a
    call through: until its backoff ends (``"open"``), until the earliest
    probe's lease ends (``"probes_busy"``), or ``None`` when no time is
    known (``"forced_open"``). ``reason`` is ``"open"``, ``"probes_busy"``,
    ``"forced_open"`` or ``"ramping"``.
    """

    def __init__(self, message: str, retry_after: Optional[float], reason: str) -> None:
        super().__init__(message, retry_after, reason)
        self.retry_after = retry_after
        self.reason = reason

    def __str__(self) -> str:
        return str(self.args[0])


class PermitUsed(RuntimeError):
    """A permit's verdict was recorded twice: a permit is one call."""


class _RefusedTrigger(Exception):
    """A trigger the queue did not take, carried back to the caller."""

    def __init__(self, message: str, trigger: Any, priority: Any) -> None:
        super().__init__(message, trigger, priority)
        self.trigger = trigger
        self.priority = priority

    def __str__(self) -> str:
        return str(self.args[0])


class QueueFull(_RefusedTrigger):
    """``Emitter.enqueue``: the dead-letter queue is full of triggers of this
    class or higher. The trigger is handed back in ``trigger``."""


class EmitterShutDown(_RefusedTrigger):
    """``Emitter.enqueue`` after ``shutdown``: nothing is queued any more. The
    trigger is handed back in ``trigger``."""
