"""tailguard: a latency-primary circuit breaker, emitter and priority-aware
dead-letter queue for Python routers, with the hot path in Rust.

A ``Breaker`` watches one downstream consumer's tail latency and errors and
trips before that consumer can stall the router; an ``Emitter`` wraps each
call to it with the breaker, a bulkhead and a timeout, and diverts what is
not delivered to a dead-letter queue instead of waiting. See the package
README for a walk-through, and ``help()`` on each name.
"""

import atexit as _atexit
import os as _os

from ._native import Breaker, Permit, Registry, _after_fork_in_child, _stop_listeners
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
    Limits,
    Mode,
    Priority,
    Ramp,
    Rejections,
    RelativeLatency,
    Replayed,
    Snapshot,
    State,
    Totals,
    Transition,
    WindowStats,
)

# At exit, no listener is called any more, and the calls in progress are
# waited for (2 s at most): a thread inside Python while the interpreter
# ends would be ended in the middle of Rust code.
_atexit.register(_stop_listeners)
# A forked child has no copy of the parent's background thread: start its
# own, for the breakers it inherited and those it builds.
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)

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
    "Limits",
    "Mode",
    "Priority",
    "Ramp",
    "Rejections",
    "RelativeLatency",
    "Replayed",
    "Snapshot",
    "State",
    "Totals",
    "Transition",
    "WindowStats",
]
