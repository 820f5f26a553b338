"""Ports for engines the lab starts itself: one free TCP port on 127.0.0.1."""
from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any

__all__ = ["free_port", "port_is_explicit", "launch_port", "port_for"]


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


def port_is_explicit(server: Any) -> bool:
    """Whether ``server.port`` was given (in params.yaml, an override, or ``LAB_SERVER_PORT``,
    :data:`lab.config.loading.SERVER_PLACEMENT_ENV`) rather than left at the schema's default.

    :param server: a :class:`lab.config.schema.ServerParams` (pydantic: ``model_fields_set``).
    """
    return "port" in server.model_fields_set


def launch_port(params: Any) -> int:
    """The port an engine launch listens on: ``server.port`` when given, or for an engine the lab
    models itself (the emulator) a fresh :func:`free_port` when not, so two checkouts on one shared
    machine do not both ask for 30000. Real SGLang keeps the schema's default, SGLang's own
    (30000, ``sglang/srt/server_args.py`` ``port: int = 30000``), when none is given: a taken port
    then fails fast in the preflight with its fix.

    :param params: a :class:`lab.config.schema.LabParams`.
    :returns: a TCP port number.
    """
    from lab.engine.registry import engine_for

    return port_for(params.server, engine_for(params.engine))


def port_for(server: Any, eng: Any) -> int:
    """:func:`launch_port` from ``params.server`` (``server``) and the engine (``eng``, a
    :class:`lab.engine.registry.Engine`: its ``picks_free_port``).

    :returns: a TCP port number.
    """
    if port_is_explicit(server) or not eng.picks_free_port:
        return server.port
    return free_port()
