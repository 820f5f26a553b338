"""Server process: the engine's process-group lifecycle, given a :class:`~lab.engine.command.ServerCommand`.

After guidellm ``tests/e2e/vllm_sim_server.py``: start the command in its own process group
with output to ``server.log``, record the group id on disk, poll readiness with a deadline
while checking that the process lives, and stop the whole group with SIGTERM then SIGKILL
on every exit path. A group recorded by a run whose kernel was killed hard is found and
stopped by the next launch (:func:`stop_stale_servers`). Also the checks made just before a
launch: the port is free (:func:`check_port_free`) and the host is loopback
(:func:`exposure_warning`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from lab.config import main_repo_root, repo_root
from lab.engine.command import ServerCommand
from lab.engine.registry import ENGINES, engine_named

__all__ = [
    "ServerError",
    "ServerProcess",
    "HEALTH_TIMEOUT_S",
    "check_port_free",
    "stop_stale_servers",
    "exposure_warning",
    "log_tail",
]


#: Read timeout of the confirming ``/health`` (SGLang answers within its 20 s
#: ``SGLANG_HEALTH_CHECK_TIMEOUT``, ``entrypoints/http_server.py:218``).
HEALTH_TIMEOUT_S = 30.0


class ServerError(RuntimeError):
    """The engine could not be started, became unready, or its port is taken.

    The message names the cause and the fix, and includes the server log's tail when the
    process died.
    """


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`ServerError` if ``host:port`` cannot be bound (something listens).

    The message names the owning process when psutil can see it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            return
        except OSError:
            pass
    owner = ""
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                owner = f" by pid {conn.pid} ({' '.join(psutil.Process(conn.pid).cmdline()[:4])})"
                break
    except (psutil.Error, OSError):
        pass
    raise ServerError(
        f"port {port} on {host} is in use{owner}. Fix: stop that process, or set server.port "
        "in params.yaml to a free port"
    )


def exposure_warning(host: str) -> str | None:
    """A warning when ``host`` is not loopback (the engine would be reachable from the
    network, unauthenticated); None for ``127.0.0.1``, ``::1``, ``localhost``."""
    if host in ("127.0.0.1", "::1", "localhost") or host.startswith("127."):
        return None
    return (f"[lab] WARNING: server.host={host} exposes the engine beyond this machine without "
            "authentication. Fix: set server.host: 127.0.0.1 unless you mean it")


def _set_parent_death_signal() -> None:
    """In the engine child (after fork): get SIGTERM if the launching thread dies
    (Linux ``prctl(PR_SET_PDEATHSIG)``), so a SIGKILLed notebook kernel does not orphan it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _owner_alive(rec: dict) -> bool:
    """True if the process that launched a recorded engine still runs (same start time)."""
    try:
        owner = psutil.Process(rec["owner_pid"])
        return abs(owner.create_time() - rec["owner_create_time"]) < 1.0 and owner.status() != psutil.STATUS_ZOMBIE
    except (KeyError, psutil.Error):
        return False


def _state_dir() -> Path:
    d = main_repo_root(repo_root()) / ".cache" / "servers"
    d.mkdir(parents=True, exist_ok=True)
    return d


def stop_stale_servers(state_dir: Path | None = None, *, log=print) -> list[int]:
    """Stop engine process groups recorded by earlier runs that did not clean up.

    A record is ``<state_dir>/<pgid>.json`` holding the leader's pid, start time and argv,
    and the launching process (``owner_pid``, ``owner_create_time``: the notebook kernel).
    A group is stopped only if its leader still runs the recorded command (so a reused pid
    is never killed) and its owner is gone (a kernel killed hard ran no ``finally``); a
    group whose owner still runs belongs to a live run and is left alone (the port check
    then names it).

    :returns: the process-group ids that were stopped.
    """
    stopped = []
    for rec_path in sorted((state_dir or _state_dir()).glob("*.json")):
        leader_gone = False
        try:
            rec = json.loads(rec_path.read_text())
            proc = psutil.Process(rec["pid"])
            same = abs(proc.create_time() - rec["create_time"]) < 1.0 and proc.cmdline() == rec["argv"]
        except psutil.NoSuchProcess:
            same, leader_gone = False, True
        except (psutil.AccessDenied, ValueError, KeyError, OSError):
            same = False
        if (same or leader_gone) and _owner_alive(rec):
            continue  # a live run's engine: not stale (its own stop() handles the group)
        # The leader exited but a child of its group lives on (an SGLang crash leaves
        # exactly that: a scheduler stuck in a CUDA call). Linux does not reuse a pid while a
        # process group of that id exists, so the group's members are the recorded engine's.
        orphans = leader_gone and _group_alive(rec["pgid"])
        if same or orphans:
            why = "owner" if same else "leader exited, a child lives on; owner"
            log(f"[lab] stopping stale engine process group {rec['pgid']} left by an earlier run "
                f"({why} pid {rec.get('owner_pid')} is gone; port {rec.get('port')})")
            _kill_group(rec["pgid"], grace_s=10.0)
            stopped.append(rec["pgid"])
        rec_path.unlink(missing_ok=True)
    return stopped


def _group_alive(pgid: int) -> bool:
    """True while a non-zombie process of group ``pgid`` exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def _kill_group(pgid: int, grace_s: float) -> bool:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL what is left.

    :returns: True if SIGKILL was needed.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return False
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 5.0
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def log_tail(path: Path, n: int = 40) -> str:
    """The last ``n`` lines of a log file ('' if absent), secret values of the environment
    scrubbed (the tail goes into error messages, notebook outputs and result files)."""
    from lab.redact import scrub_secrets

    try:
        return scrub_secrets("\n".join(path.read_text(errors="replace").splitlines()[-n:]))
    except OSError:
        return ""


class ServerProcess:
    """One engine process group, used as a context manager.

    ``with ServerProcess(cmd, log_path) as srv: srv.wait_ready(timeout_s)`` — leaving the
    block (normally, by exception, or by SIGTERM turned into SystemExit) stops the group.

    :param command: from :func:`lab.engine.command.build_server_command`.
    :param log_path: stdout+stderr of the engine (``results/<mode>/server.log``).
    :param stop_grace_s: seconds between SIGTERM and SIGKILL.
    :param nvml: NVML module for the GPU-memory wait (tests inject a fake; default pynvml).
    :param gpu_free_timeout_s: how long a GPU engine's launch waits for the previous engine's
        GPU memory (:mod:`lab.engine.gpumem`).
    """

    def __init__(self, command: ServerCommand, log_path: str | os.PathLike[str], *,
                 stop_grace_s: float = 20.0, state_dir: Path | None = None, nvml=None,
                 gpu_free_timeout_s: float = 120.0) -> None:
        self.command = command
        self.log_path = Path(log_path)
        self.stop_grace_s = stop_grace_s
        self.state_dir = state_dir or _state_dir()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.proc: psutil.Popen | None = None
        self.started_at: float | None = None
        self.killed = False  # True once stop() needed SIGKILL
        self.nvml = nvml  # NVML module (tests inject a fake); None: pynvml
        self.gpu_free_timeout_s = gpu_free_timeout_s
        self._gpu_baseline: list[int] | None = None

    @property
    def base_url(self) -> str:
        return self.command.base_url

    def _gpu_state(self) -> Path:
        return self.state_dir / "last_gpu_engine.state"  # not *.json: those are group records

    def _wait_previous_gpu_memory(self) -> None:
        """On a GPU engine: wait until NVML shows the previous engine's memory freed
        (:mod:`lab.engine.gpumem`); raises :class:`ServerError` naming the GPU if it is not."""
        from lab.engine.gpumem import GpuMemoryNotFreed, gpu_snapshot, wait_gpu_memory_freed

        state = self._gpu_state()
        try:
            prev = json.loads(state.read_text())
        except (OSError, ValueError):
            prev = None
        if prev:
            try:
                waited = wait_gpu_memory_freed(prev.get("pids", []), prev.get("baseline_used"), nvml=self.nvml,
                                               timeout_s=self.gpu_free_timeout_s)
            except GpuMemoryNotFreed as exc:
                raise ServerError(str(exc)) from None
            if waited > 1.0:
                print(f"[lab] waited {waited:.1f} s for the previous engine's GPU memory to be freed", file=sys.stderr)
            state.unlink(missing_ok=True)
        snap = gpu_snapshot(self.nvml)
        self._gpu_baseline = snap["used_bytes"] if snap else None

    def start(self) -> "ServerProcess":
        """Launch the engine; raises :class:`ServerError` if its port is already taken or
        (GPU engine) the previous engine's GPU memory is not freed in time."""
        stop_stale_servers(self.state_dir)
        check_port_free(self.command.host, self.command.port)
        if _holds_gpus(self.command.engine):
            self._wait_previous_gpu_memory()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.command.env, "PYTHONUNBUFFERED": "1"}
        warning = exposure_warning(self.command.host)
        if warning:
            print(warning, file=sys.stderr)
        # Parent-death signal only when launched from the main thread: PR_SET_PDEATHSIG
        # fires when the launching *thread* exits, and a worker thread may end early.
        pdeath = _set_parent_death_signal if threading.current_thread() is threading.main_thread() else None
        with open(self.log_path, "ab") as log:
            if warning:
                log.write(f"{warning}\n".encode())
            log.write(f"[lab] launch: {self.command.display()}\n".encode())
            log.flush()
            self.proc = psutil.Popen(self.command.argv, stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL, env=env, preexec_fn=pdeath,
                                     start_new_session=True, cwd=str(repo_root()))
        self.started_at = time.perf_counter()
        me = psutil.Process()
        rec = {"pid": self.proc.pid, "pgid": self.proc.pid, "create_time": self.proc.create_time(),
               "argv": self.command.argv, "port": self.command.port,
               "owner_pid": me.pid, "owner_create_time": me.create_time()}
        rec_path = self.state_dir / f"{self.proc.pid}.json"
        tmp = rec_path.with_name(f".{rec_path.name}.tmp")
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, rec_path)
        return self

    def alive(self) -> bool:
        """True while the leader process has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def _probe(self) -> bool:
        """One readiness probe. SGLang 0.5.23's ``/ready`` is cheap; its ``/health`` runs a
        one-token generation and answers after >= 1 s (``http_server.py`` ~714-800), up to
        ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20 s). So: poll ``/ready``, and once it says 200
        confirm with one ``/health`` (timeout 30 s) that a generation goes through. An engine
        without ``/ready`` (404: an older build) is probed with ``/health`` alone."""
        try:
            with urllib.request.urlopen(self.base_url + "/ready", timeout=5) as resp:
                if resp.status != 200:
                    return False
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                return False
        except (urllib.error.URLError, OSError):
            return False
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=HEALTH_TIMEOUT_S) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float, *, poll_s: float = 0.25, on_poll=None) -> float:
        """Block until the engine is ready (:meth:`_probe`); returns seconds since start.

        :param on_poll: called with the elapsed seconds on every poll (progress display).
        :raises ServerError: the process exited (message holds the log tail) or the
            deadline passed (the group is stopped first).
        """
        assert self.proc is not None and self.started_at is not None, "start() first"
        deadline = self.started_at + timeout_s
        while True:
            elapsed = time.perf_counter() - self.started_at
            if not self.alive():
                raise ServerError(
                    f"engine exited with code {self.proc.returncode} after {elapsed:.1f} s before "
                    f"becoming ready. Log tail ({self.log_path}):\n{log_tail(self.log_path)}"
                )
            if self._probe():
                return elapsed
            if on_poll is not None:
                on_poll(elapsed)
            if time.perf_counter() > deadline:
                self.stop()
                raise ServerError(
                    f"engine not ready within server.startup_timeout_s={timeout_s:g} s. Fix: raise "
                    f"the timeout or read the log. Log tail ({self.log_path}):\n{log_tail(self.log_path)}"
                )
            time.sleep(poll_s)

    def stop(self) -> None:
        """Stop the whole process group (SIGTERM, then SIGKILL after the grace period)."""
        if self.proc is None:
            return
        if _holds_gpus(self.command.engine):  # the next launch waits for these pids' GPU memory
            pids = [self.proc.pid]
            for p in psutil.process_iter():
                try:
                    if os.getpgid(p.pid) == self.proc.pid:
                        pids.append(p.pid)
                except (OSError, psutil.Error):
                    continue
            rec = {"pids": sorted(set(pids)), "baseline_used": self._gpu_baseline}
            tmp = self._gpu_state().with_name(".last_gpu_engine.state.tmp")
            tmp.write_text(json.dumps(rec))
            os.replace(tmp, self._gpu_state())
        if _kill_group(self.proc.pid, self.stop_grace_s):
            self.killed = True
            try:
                with open(self.log_path, "a") as log:
                    log.write(f"[lab] engine ignored SIGTERM for {self.stop_grace_s:g} s "
                              "(server.stop_grace_s); its process group was SIGKILLed\n")
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except (psutil.TimeoutExpired, OSError):
            pass
        (self.state_dir / f"{self.proc.pid}.json").unlink(missing_ok=True)
        self._redact_log()

    def _redact_log(self) -> None:
        """Scrub secret values (secret-named variables of the lab's environment and of the
        engine's added env, ``--api-key``-like flags) that the engine itself printed (SGLang logs its server args) from ``server.log``, which
        becomes an MLflow artifact."""
        from lab.redact import argv_secrets, scrub_secrets

        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return
        # the lab's environment too: HF_TOKEN exported in the shell reaches the engine
        clean = scrub_secrets(text, self.command.env, argv_secrets(self.command.argv))
        if clean != text:
            tmp = self.log_path.with_name(f".{self.log_path.name}.tmp")
            tmp.write_text(clean)
            os.replace(tmp, self.log_path)

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _holds_gpus(engine: str) -> bool:
    """Whether a launch of ``engine`` (a registered name; any other holds none) holds GPU memory."""
    return engine in ENGINES and engine_named(engine).holds_gpus
