"""Ports for engines the lab starts itself: one free TCP port on 127.0.0.1."""
from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, drawn at random *below*
    the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768 up by
    default). Ports from ``bind(0)`` come from that range, so a notebook kernel's ZMQ
    sockets, opened between this call and the engine's launch, cannot take the port (seen
    in tests/e2e/test_interrupt.py, which starts nine kernels at once). Falls back to any free
    port when none is free below the range."""
    lo = 32768
    try:
        lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(max(1024, lo // 2), lo)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # nothing free below the range: any free port
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
