"""``@breaker`` on a coroutine function (plain functions are guarded natively)."""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable

__all__ = ["guard_async"]


def guard_async(breaker: Any, func: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Each await takes a permit first (or raises ``BreakerOpen`` without
    calling ``func``), then records success, or failure if it raises, with
    the latency measured on the breaker's clock. A cancelled call gives its
    permit back with no verdict (the consumer was not judged)."""

    @functools.wraps(func)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        permit = breaker.allow()
        try:
            result = await func(*args, **kwargs)
        except Exception:
            permit.record(False)
            raise
        except BaseException:
            # Cancelled (or interrupted): no verdict on the consumer.
            permit.abandon()
            raise
        permit.record()  # a success (no argument: cheaper to call than record(True))
        return result

    return guarded
