"""The unit tier: tests that start no process and open no socket (issue 20, item 4).

Every phase of a test under ``tests/unit/`` (setup, call, teardown, so a module fixture
that would launch an emulator is caught too) runs with process creation and network access
replaced by a recorder: starting a subprocess (``subprocess``, ``asyncio`` subprocesses,
``os.system``/``os.popen``, ``multiprocessing``), forking (``os.fork``/``forkpty``,
``posix_spawn``), connecting or binding a socket, sending a datagram or resolving a host
name raises :class:`UnitTierViolation` there, and the test fails even when the code under
test caught the exception (many lab functions "never raise"). A socket pair (the self-pipe
of an asyncio event loop) is allowed: it reaches nothing outside the process.

A test that needs any of that belongs in ``tests/component/`` (engine, emulator, git or
other processes; local servers) or ``tests/e2e/`` (DVC, papermill, Chromium, PostgreSQL).
"""

from __future__ import annotations

import importlib.util
import multiprocessing.util
import os
import platform
import socket
import subprocess
import sys
import types

import pytest


import urllib3  # noqa: E402,F401  (see below)

# Probes some libraries make once, when first imported, done here before any test so that no
# test is charged with them (whichever test first imported MLflow would otherwise fail):
# platform.uname() runs `uname -p` once per interpreter and caches it (MLflow asks at import,
# mlflow/telemetry/schemas.py: platform.platform()); urllib3 binds a socket to [::1]:0 at
# import to learn whether IPv6 works (urllib3/util/connection.py: HAS_IPV6).
platform.platform()


class UnitTierViolation(RuntimeError):
    """A unit test started a process or used the network; the message says what and where to move it."""


#: ``(owner, attribute, what it does)`` replaced while a unit test runs.
_GUARDED = (
    (subprocess.Popen, "_execute_child", "starts a subprocess"),
    (os, "fork", "forks"),
    (os, "forkpty", "forks"),
    (os, "posix_spawn", "spawns a process"),
    (os, "posix_spawnp", "spawns a process"),
    (os, "system", "runs a shell command"),
    (multiprocessing.util, "spawnv_passfds", "spawns a process"),
    (socket.socket, "connect", "connects a socket"),
    (socket.socket, "connect_ex", "connects a socket"),
    (socket.socket, "bind", "binds a socket"),
    (socket.socket, "sendto", "sends a datagram"),
    (socket, "getaddrinfo", "resolves a host name"),
)


def _recorder(what: str, seen: list[str]):
    def refuse(*args, **kwargs):
        detail = " ".join(str(a)[:80] for a in args[1:3] if not isinstance(a, socket.socket))
        seen.append(f"{what} ({detail})" if detail else what)
        raise UnitTierViolation(f"a unit test {what}. Fix: move the test to tests/component/ (processes, "
                                "sockets) or tests/e2e/ (DVC, papermill, Chromium, PostgreSQL)")
    return refuse


def _guarded(item):
    """One phase of ``item`` with :data:`_GUARDED` replaced; fails it if anything was refused
    (a generator for the three ``wrapper=True`` hooks below)."""
    seen: list[str] = []
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in _GUARDED if hasattr(owner, name)]
    for owner, name, what in _GUARDED:
        if hasattr(owner, name):
            setattr(owner, name, _recorder(what, seen))
    try:
        result = yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
    if seen:
        pytest.fail(f"{item.nodeid}: a unit test must start no process and open no socket, but it "
                    f"{'; '.join(dict.fromkeys(seen))}. Fix: move it to tests/component/ or tests/e2e/",
                    pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _guarded(item))


@pytest.fixture(scope="module")
def sglang_adaptive(sglang_nodeps_0516):
    """SGLang 0.5.16's adaptive_spec_params module, its one SGLang import (``log_info_on_rank0``)
    replaced by a logger call; sys.modules left as found."""
    src = sglang_nodeps_0516 / "sglang" / "srt" / "speculative" / "adaptive_spec_params.py"
    utils = types.ModuleType("sglang.srt.utils")
    utils.log_info_on_rank0 = lambda logger, msg: logger.info(msg)
    saved = {k: sys.modules.get(k) for k in ("sglang", "sglang.srt", "sglang.srt.utils")}
    try:
        sys.modules.update({"sglang": types.ModuleType("sglang"), "sglang.srt": types.ModuleType("sglang.srt"),
                            "sglang.srt.utils": utils})
        spec = importlib.util.spec_from_file_location("_sglang_0516_adaptive_spec_params", src)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod
