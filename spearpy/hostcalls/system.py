"""log, clocks, randomness and sleep."""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING

from spearpy import abi
from spearpy.errors import HostInterrupt
from spearpy.memory import GuestFault
from spearpy.outcome import Outcome

if TYPE_CHECKING:
    from spearpy.context import RunContext


def log(run: RunContext, level: int, ptr: int, length: int) -> int:
    if length < 0 or length > abi.MAX_LOG_LEN:
        return abi.EINVAL
    try:
        run.memory.check(ptr, length)
        # The budget decides before the line is read (the bounds before it).
        if not run.count_log(length):
            raise HostInterrupt(Outcome.LOG_LIMIT, f"the guest logged more than "
                                f"{run.config.max_log_bytes} bytes (max_log_bytes)")
        raw = run.memory.read(ptr, length)
    except GuestFault:
        return abi.EFAULT
    name = abi.LOG_LEVELS.get(level, "info")
    # A guest ending its line with a newline (printf habit) means one line,
    # not that line and an empty one.
    text = raw.decode("utf-8", "replace").removesuffix("\n")
    run.keep_log(name, text)
    if run.options.guest_log is not None:
        run.options.guest_log(name, text)
        return 0
    lines = text.replace("\r", "\\r").split("\n")
    # One prefixed line per guest line so a guest cannot forge host log lines.
    run.write_stderr("".join(f"[{name}] {line}\n" for line in lines))
    return 0


def time_now_ms(_run: RunContext) -> int:
    return time.time_ns() // 1_000_000


def wall_time_s(_run: RunContext) -> int:
    return time.time_ns() // 1_000_000_000


def random_i64(_run: RunContext) -> int:
    return secrets.randbits(64) - (1 << 63)


def sleep_ms(run: RunContext, ms: int) -> None:
    run.interrupts.wait(max(ms, 0) / 1000.0)
