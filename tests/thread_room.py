"""For child processes of tests that need a process at its thread limit."""

from __future__ import annotations

import resource
import threading


def use_up_thread_room() -> bool:
    """Leave this process no address space for one more thread's stack (1 GiB
    stacks, 256 MiB of room); whether a thread could still be started."""
    with open("/proc/self/status") as status:
        mapped = int(next(line for line in status if line.startswith("VmSize")).split()[1]) << 10
    threading.stack_size(1 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (256 << 20), resource.RLIM_INFINITY))
    try:
        threading.Thread(target=lambda: None).start()
    except RuntimeError:
        return False
    return True
