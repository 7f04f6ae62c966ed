"""When and how long to wait before retrying an upstream request.

The policy follows openai-python (`_base_client.py`): retry connection errors,
timeouts, 408, 409, 429 and 5xx; honour `retry-after-ms` / `Retry-After` when
the server sends a sane value; otherwise exponential backoff from 0.5 s capped
at 8 s with up to 25 % jitter. A 429 whose error code is `insufficient_quota`
is final: waiting does not add credit.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

RETRYABLE_STATUS = frozenset({408, 409, 429})
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
# openai-python ignores Retry-After above 60 s; so do we.
MAX_RETRY_AFTER = 60.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 2
    initial_delay: float = INITIAL_RETRY_DELAY
    max_delay: float = MAX_RETRY_DELAY
    # Replay serves recorded answers instantly: waiting there only slows tests.
    honour_server_delay: bool = True


def status_is_retryable(status: int, error_code: str | None) -> bool:
    if status == 429 and error_code == "insufficient_quota":
        return False
    return status in RETRYABLE_STATUS or status >= 500


def retry_after_seconds(headers: dict[str, str]) -> float | None:
    """The delay the server asked for, or None when absent or out of range."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000.0
        except ValueError:
            value = -1.0
        if 0 <= value <= MAX_RETRY_AFTER:
            return value
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        # An HTTP-date; anything else is the server's garbage, not a reason to fail.
        try:
            parsed = email.utils.parsedate_to_datetime(raw)
            value = float(parsed.timestamp()) - time.time()
        except (ValueError, TypeError, IndexError, OverflowError):
            return None
    return value if 0 <= value <= MAX_RETRY_AFTER else None


def backoff_delay(policy: RetryPolicy, retry_number: int, server_hint: float | None) -> float:
    """Delay before retry number `retry_number` (1-based)."""
    if server_hint is not None and policy.honour_server_delay:
        return server_hint
    delay: float = min(policy.initial_delay * 2.0 ** (retry_number - 1), policy.max_delay)
    return delay * (1 - 0.25 * random.random())
