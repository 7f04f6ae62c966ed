"""Whether a host is this machine: for what only a local peer may do (the web
guard's token-free access, Ollama discovery without `allow_remote`)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """`localhost` or an address of 127.0.0.0/8 or ::1 (brackets allowed)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere
