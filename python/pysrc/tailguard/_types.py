"""The plain values tailguard hands out: states, modes, priorities,
transitions, snapshots, emit outcomes and emitter statistics.

Every one of them is an immutable value (a ``str`` enum or a frozen
dataclass) that compares, prints and pickles as expected; none holds a
reference into the breaker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from ._native import Delivered

__all__ = [
    "State",
    "Mode",
    "Priority",
    "Transition",
    "LatencyQuantiles",
    "WindowStats",
    "Totals",
    "Rejections",
    "Snapshot",
    "Divert",
    "Delivered",
    "Diverted",
    "HandedBack",
    "EmitterStats",
    "Replayed",
]


class State(str, enum.Enum):
    """A breaker's state. Compares equal to its value: ``State.OPEN == "open"``."""

    CLOSED = "closed"
    """Calls pass and are measured."""
    OPEN = "open"
    """Calls are rejected at once."""
    HALF_OPEN = "half_open"
    """A bounded number of probe calls pass."""

    def __str__(self) -> str:
        return self.value


class Mode(str, enum.Enum):
    """An operator's override of a breaker (``Mode.NORMAL`` when there is none)."""

    NORMAL = "normal"
    FORCED_OPEN = "forced_open"
    FORCED_CLOSED = "forced_closed"
    DISABLED = "disabled"
    METRICS_ONLY = "metrics_only"

    def __str__(self) -> str:
        return self.value


class Priority(enum.IntEnum):
    """A trigger's class in the dead-letter queue: when the queue is full, a
    higher class displaces the oldest item of the lowest class below it, and
    ``pop`` and replay take the highest class first."""

    IDLE = 0
    ROUTINE = 1
    CRITICAL = 2


@dataclass(frozen=True)
class Transition:
    """One change of a breaker's state or mode, as its listeners get it."""

    from_state: State
    to: State
    from_mode: Mode
    to_mode: Mode
    generation: int
    """Counts every transition of the breaker."""
    reason: str
    """Why, in snake case: ``"latency_breach"`` (the quantile over the
    threshold for ``trip_windows`` windows), ``"sparse_latency"`` (slow
    calls judged across windows too small to judge alone: few calls per
    window, however busy the second), ``"relative_latency"``,
    ``"error_rate"``, ``"failure_count"``, ``"backoff_elapsed"`` (OPEN to
    HALF_OPEN), ``"probe_failed"``, ``"probe_slow"``,
    ``"probe_lease_expired"``, ``"probes_succeeded"`` (HALF_OPEN to CLOSED),
    ``"forced_open"``, ``"forced_closed"``, ``"disabled"``,
    ``"metrics_only"``, ``"reset"``, ``"manual_trip"``."""
    at: float
    """When, in seconds since the breaker was built, on its clock (not a
    wall-clock time)."""
    flapping: bool


@dataclass(frozen=True)
class LatencyQuantiles:
    """Latency quantiles of a closed window, in seconds."""

    p50: float
    p90: float
    p99: float
    p999: float


@dataclass(frozen=True)
class WindowStats:
    """The last closed window (or span of windows) the breaker judged."""

    calls: int
    errors: int
    slow: int
    cancelled: int
    windows: int
    closed_at: float
    latency: Optional[LatencyQuantiles]


@dataclass(frozen=True)
class Totals:
    """Every call the breaker has judged since it was built."""

    calls: int
    errors: int
    slow: int
    cancelled: int


@dataclass(frozen=True)
class RelativeLatency:
    """The relative latency rule's settings, as built (the ``relative_latency``
    setting): a call is slow over ``multiplier`` times the healthy P99 the
    breaker learned, kept within ``floor`` and ``ceiling`` seconds."""

    multiplier: float
    floor: float
    ceiling: float
    max_rise_per_hour: float
    warmup: int
    """Healthy windows learned before the rule judges."""
    initial_baseline: Optional[float]


@dataclass(frozen=True)
class Limits:
    """The settings a breaker judges its windows by, as built (spans rounded
    to whole windows, as the breaker uses them; seconds where a time): with
    them, whoever reads a snapshot (a dashboard, an alert) can tell whether
    a window breached without knowing the configuration."""

    window: float
    latency_threshold: float
    """A call slower than this is slow (with the relative rule: the
    ceiling; ``Snapshot.latency_threshold`` is the one in force)."""
    slow_fraction: float
    """A window breaches when more than this fraction of its calls is slow
    (``1 - quantile``)."""
    trip_windows: int
    min_calls: int
    error_rate: float
    error_window: float
    failure_count: Optional[Tuple[int, float]]
    """``(failures, within seconds)`` that trip, if set."""
    relative_latency: Optional[RelativeLatency]
    recovery_ramp: Optional[float]


@dataclass(frozen=True)
class Ramp:
    """A recovery ramp under way: traffic handed back gradually after the
    breaker closed."""

    admitted: float
    """The share of calls admitted now, from 0 at the close to 1 at the end."""
    remaining: float
    """Seconds until the ramp ends."""


@dataclass(frozen=True)
class Rejections:
    """Calls the breaker turned away since it was built, by reason."""

    open: int
    probes_busy: int
    forced: int
    ramping: int


@dataclass(frozen=True)
class Snapshot:
    """A breaker's state and counters at one instant (``Breaker.snapshot()``)."""

    state: State
    mode: Mode
    generation: int
    trip_count: int
    backoff_level: int
    consecutive_breaches: int
    """Windows in a row over the latency threshold (CLOSED)."""
    probes_in_flight: int
    probe_successes: int
    """Good probes so far in this HALF_OPEN."""
    next_probe_in: Optional[float]
    """Seconds until a probe may pass (OPEN only)."""
    open_for: Optional[float]
    """Seconds the breaker has been OPEN (OPEN only)."""
    window: WindowStats
    totals: Totals
    rejections: Rejections
    shadow_rejections: int
    """Calls a breaker in ``metrics_only`` mode let through that it would
    have rejected."""
    events_lost: int
    listener_panics: int
    """Listener calls that raised (each exception was reported to
    ``sys.unraisablehook`` and the breaker went on)."""
    uptime: float
    flapping: bool
    latency_threshold: float
    latency_baseline: Optional[float]
    limits: Limits
    """The settings the window counts are judged by."""
    ramp: Optional[Ramp]
    """The recovery ramp, while one runs (``recovery_ramp`` setting)."""


@dataclass(frozen=True)
class Divert:
    """Why a trigger was not delivered."""

    kind: str
    """``"open"`` (the breaker rejected the call), ``"bulkhead_full"``,
    ``"timed_out"``, ``"failed"``: the first two never called the consumer."""
    error: Optional[BaseException] = None
    """The exception the call raised (``"failed"`` only)."""
    elapsed: Optional[float] = None
    """How long the call ran, in seconds (``"timed_out"`` only)."""
    retry_after: Optional[float] = None
    """Seconds until the breaker may let a call through (``"open"`` only)."""

    @property
    def called(self) -> bool:
        """Whether the consumer was called (it timed out or failed)."""
        return self.kind in ("timed_out", "failed")


@dataclass(frozen=True)
class Diverted:
    """The trigger is in the dead-letter queue, for replay. If the queue was
    full, ``displaced`` is the ``(trigger, priority)`` of the older,
    lower-class trigger that gave way to it: the caller's to keep."""

    reason: Divert
    displaced: Optional[tuple] = None
    delivered = False


@dataclass(frozen=True)
class HandedBack:
    """The trigger could not be delivered nor queued: the caller keeps it.
    ``not_queued`` is ``"queue_full"`` or ``"shut_down"``."""

    trigger: Any
    priority: Priority
    reason: Divert
    not_queued: str
    delivered = False


@dataclass(frozen=True)
class EmitterStats:
    """An emitter's counters. Two identities hold at every read once emits
    have finished: ``emitted == delivered + diverted + handed_back +
    cancelled`` and ``into_queue == out_of_queue``."""

    delivered: int
    overran: int
    diverted_open: int
    diverted_bulkhead: int
    diverted_timeout: int
    diverted_failed: int
    handed_back_full: int
    handed_back_shut_down: int
    displaced: int
    cancelled: int
    dropped_in_panics: int
    replayed: int
    replay_handed_back: int
    drained: int
    queued_by_hand: int
    queued: int
    """Triggers in the dead-letter queue now."""
    pending: bool
    """Whether a failed replay keeps a trigger at the head of the queue
    (taken out, to go first; counted in ``len(emitter)``)."""
    bulkhead_in_flight: int
    emit_count: int
    """Emits timed (every emit that returned an outcome)."""
    emit_time_sum: float
    """Their times, summed, in seconds: what the router paid."""
    diverted: int = field(init=False)
    handed_back: int = field(init=False)

    def __post_init__(self) -> None:
        d = (
            self.diverted_open
            + self.diverted_bulkhead
            + self.diverted_timeout
            + self.diverted_failed
        )
        object.__setattr__(self, "diverted", d)
        object.__setattr__(self, "handed_back", self.handed_back_full + self.handed_back_shut_down)

    @property
    def emitted(self) -> int:
        """Emits finished: delivered, diverted, handed back or cancelled
        (a sum of counters each counted on its own: compare it with your own
        count of emits to check that none went missing)."""
        return self.delivered + self.diverted + self.handed_back + self.cancelled

    @property
    def into_queue(self) -> int:
        """Triggers that went into the queue: diverted, or queued by hand."""
        return self.diverted + self.queued_by_hand

    @property
    def out_of_queue(self) -> int:
        """Where they are now: replayed, handed back by replay, drained,
        displaced, still queued, or kept at the head by replay."""
        return (
            self.replayed
            + self.replay_handed_back
            + self.drained
            + self.displaced
            + self.queued
            + int(self.pending)
        )


@dataclass(frozen=True)
class Replayed:
    """What a replay did: ``delivered`` triggers; why it stopped
    (``"empty"``, ``"max"``, ``"not_closed"``, ``"busy"``, or the failed
    trigger's ``Divert``); and a trigger handed back after its last
    attempt, as ``(trigger, priority)``, the caller's to keep."""

    delivered: int
    stopped: Any
    handed_back: Optional[tuple] = None


def _snapshot(d: dict) -> Snapshot:
    """A ``Snapshot`` from the native module's dict: the same fields, the
    nested ones made values."""
    w = dict(d["window"])
    lat = w.pop("latency")
    return Snapshot(
        **{
            **d,
            "state": State(d["state"]),
            "mode": Mode(d["mode"]),
            "window": WindowStats(latency=None if lat is None else LatencyQuantiles(*lat), **w),
            "totals": Totals(**d["totals"]),
            "rejections": Rejections(**d["rejections"]),
            "limits": _limits(d["limits"]),
            "ramp": None if d["ramp"] is None else Ramp(*d["ramp"]),
        }
    )


def _limits(d: dict) -> Limits:
    rel = d["relative_latency"]
    return Limits(**{**d, "relative_latency": None if rel is None else RelativeLatency(*rel)})


def _transition(from_state, to, from_mode, to_mode, generation, reason, at, flapping) -> Transition:
    return Transition(State(from_state), State(to), Mode(from_mode), Mode(to_mode), generation, reason, at, flapping)
