"""tailguard: a latency-primary circuit breaker, emitter and priority-aware
dead-letter queue for Python routers, with the hot path in Rust.

A ``Breaker`` watches one downstream consumer's tail latency and errors and
trips before that consumer can stall the router; an ``Emitter`` wraps each
call to it with the breaker, a bulkhead and a timeout, and diverts what is
not delivered to a dead-letter queue instead of waiting. See the package
README for a walk-through, and ``help()`` on each name.
"""

from ._native import Breaker, Permit, Registry
from ._clock import ManualClock
from ._emitter import Emitter
from ._errors import BreakerOpen, EmitterShutDown, PermitUsed, QueueFull
from ._types import (
    Delivered,
    Divert,
    Diverted,
    EmitterStats,
    HandedBack,
    LatencyQuantiles,
    Mode,
    Priority,
    Rejections,
    Snapshot,
    State,
    Totals,
    Transition,
    WindowStats,
)

__all__ = [
    "Breaker",
    "Permit",
    "Registry",
    "ManualClock",
    "Emitter",
    "BreakerOpen",
    "EmitterShutDown",
    "PermitUsed",
    "QueueFull",
    "Delivered",
    "Divert",
    "Diverted",
    "EmitterStats",
    "HandedBack",
    "LatencyQuantiles",
    "Mode",
    "Priority",
    "Rejections",
    "Snapshot",
    "State",
    "Totals",
    "Transition",
    "WindowStats",
]
