"""Preflight: checks that fail in seconds instead of after a 10-minute model load.

Run before every launch by :func:`lab.pipeline.lifetime.prepare` and from the command line as
``lab doctor``. With ``engine: sglang`` every check runs; with the emulator only the cheap
ones (port, disk, dataset, emulator profile), since it needs no GPU, SGLang or weights.

Checks (one :class:`Check` row each):

- ``gpus``: GPU count, names and free memory through nvidia-ml-py, against
  ``tp_size / nnodes`` GPUs per node (SGLang places ``tp_size`` ranks over ``nnodes`` nodes).
- ``sglang``: importable by *the Python that will run the server*, and its version.
- ``argv[<mode>]``: the mode's full argv parsed by SGLang's own
  ``sglang.srt.server_args.prepare_server_args(argv: list[str]) -> ServerArgs`` (SGLang
  0.5.23 ``srt/server_args.py``) in a subprocess of that Python, with a timeout, then
  resolved with ``resolve_once()`` / ``resolved_dict()`` (parsing alone leaves e.g. a draft
  token count of 5 where SGLang runs 3); the resolved values that decide the comparison are
  shown, or, where resolution cannot run, the raw input marked as such (``warn``).
- ``driver``: NVIDIA driver R580 or newer (SGLang 0.5.23 pins torch 2.14.1 on CUDA 13).
- ``model`` / ``draft[<path>]``: a local directory, or a snapshot in the Hugging Face cache
  (``huggingface_hub.scan_cache_dir`` when importable, else the cache layout
  ``<HF_HUB_CACHE>/models--<org>--<name>/snapshots/<rev>/``).
- ``port``, ``disk`` (free space where results and logs go), ``dataset``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lab.config import LabParams, repo_root
from lab.engine.command import flag_value, launch_command
from lab.engine.registry import engine_for
from lab.engine.window import hf_cache_dir  # noqa: F401 - public here too (preflight's __all__)

__all__ = ["Check", "PreflightError", "PreflightReport", "run_preflight", "gpu_check",
           "sglang_check", "argv_check", "weights_check", "hf_cache_dir", "format_table",
           "MIN_FREE_DISK_GB", "ARGV_CHECK_TIMEOUT_S", "driver_check", "MIN_DRIVER_MAJOR", "synthetic_check",
           "bundle_checks", "context_check", "context_row", "sglang_checks", "preflight_report"]

#: Below this free space (GiB) where results go, logs and artifacts may not fit.
MIN_FREE_DISK_GB = 2.0
#: SGLang's parser imports torch and friends: a cold import can take tens of seconds.
ARGV_CHECK_TIMEOUT_S = 180.0

OK, FAIL, WARN, SKIP = "ok", "FAIL", "warn", "skip"

# Resolved ServerArgs fields shown after a successful parse (SGLang field names).
_RESOLVED = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "speculative_attention_mode", "attention_backend",
             "prefill_attention_backend", "decode_attention_backend", "max_running_requests",
             "cuda_graph_max_bs_decode", "tp_size", "nnodes")

# Run by the server's Python: parse argv (JSON on stdin) with SGLang's real parser, then
# resolve it the way the launcher does. ``prepare_server_args`` only parses; the values
# SGLang runs with come from ``resolve_once()`` then ``resolved_dict()`` (SGLang 0.5.23
# ``srt/server_args.py`` ~244-330); ``getattr`` on the record keeps returning the raw input.
_ARGV_SNIPPET = r"""
import json, sys, traceback
argv = json.loads(sys.stdin.read())
keys = %r
def err(exc):
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
try:
    from sglang.srt.server_args import prepare_server_args
    args = prepare_server_args(argv)
except BaseException as exc:
    out = {"ok": False, "error": err(exc)}
else:
    try:
        if hasattr(args, "resolve_once"):  # 0.5.23: parse, then resolve
            args.resolve_once()
            d = args.resolved_dict()
            how = "resolve_once()"
        else:  # 0.5.16: ServerArgs.__post_init__ already resolved the fields
            d = {k: getattr(args, k, None) for k in keys}
            cg = getattr(args, "cuda_graph_config", None)
            d["cuda_graph_config"] = cg if isinstance(cg, dict) else (getattr(cg, "__dict__", None) or {})
            dec = d["cuda_graph_config"].get("decode") if isinstance(d["cuda_graph_config"], dict) else None
            if dec is not None and not isinstance(dec, dict):
                d["cuda_graph_config"] = {"decode": {"backend": getattr(dec, "backend", None), "bs": getattr(dec, "bs", None)}}
            how = "ServerArgs.__post_init__"
        vals = {k: d.get(k) for k in keys}
        dec = ((d.get("cuda_graph_config") or {}).get("decode") or {})
        vals.update({"cuda_graph_config.decode.backend": dec.get("backend"),
                     "cuda_graph_config.decode.bs": dec.get("bs")})
        out = {"ok": True, "resolved": True, "how": how, "values": vals}
    except BaseException as exc:
        out = {"ok": True, "resolved": False, "resolve_error": err(exc),
               "values": {k: getattr(args, k, None) for k in keys}}
print("LAB_PREFLIGHT_RESULT " + json.dumps(out, default=str), flush=True)
""" % (_RESOLVED,)

_VERSION_SNIPPET = r"""
import json
try:
    import sglang
    v = getattr(sglang, "__version__", None)
    if v is None:
        import importlib.metadata as md
        v = md.version("sglang")
    print("LAB_PREFLIGHT_RESULT " + json.dumps({"ok": True, "version": str(v), "file": sglang.__file__}))
except BaseException as exc:
    print("LAB_PREFLIGHT_RESULT " + json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
"""


class PreflightError(RuntimeError):
    """A preflight check failed; the message is the table with each failure's fix."""


@dataclass
class Check:
    """One row of the preflight table.

    :ivar name: what was checked (``gpus``, ``argv[eagle3_decode]``...).
    :ivar status: ``ok``, ``FAIL``, ``warn`` or ``skip``.
    :ivar detail: what was found.
    :ivar fix: what to do about a failure ('' when nothing).
    :ivar value: the value found, where later checks need it (``sglang``: its ``__version__``), else None.
    """

    name: str
    status: str
    detail: str
    fix: str = ""
    value: str | None = None


@dataclass
class PreflightReport:
    """All checks of one preflight run, for one engine."""

    engine: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings and skips pass)."""
        return all(c.status != FAIL for c in self.checks)

    def verdict(self) -> str:
        """One sentence: ready, or how many checks failed."""
        failed = [c.name for c in self.checks if c.status == FAIL]
        if not failed:
            return f"READY: engine {self.engine} can launch ({len(self.checks)} checks passed or skipped)."
        return f"NOT READY: engine {self.engine}: {len(failed)} check(s) failed: {', '.join(failed)}."

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for ``result.json``."""
        return {"engine": self.engine, "ok": self.ok, "verdict": self.verdict(),
                "checks": [asdict(c) for c in self.checks]}

    def raise_if_failed(self) -> None:
        """:raises PreflightError: with the table and verdict, when a check failed."""
        if not self.ok:
            raise PreflightError("preflight failed before launching the engine:\n" + format_table(self))


def format_table(report: PreflightReport, width: int = 70) -> str:
    """The report as a fixed-width text table plus the verdict line."""
    name_w = max([len("check")] + [len(c.name) for c in report.checks])
    lines = [f"{'check'.ljust(name_w)}  status  detail", f"{'-' * name_w}  ------  {'-' * 40}"]
    for c in report.checks:
        detail = c.detail if len(c.detail) <= 400 else c.detail[:400] + "..."
        lines.append(f"{c.name.ljust(name_w)}  {c.status.ljust(6)}  {detail}")
        if c.fix and c.status in (FAIL, WARN):
            lines.append(f"{' ' * name_w}          fix: {c.fix}")
    lines.append(report.verdict())
    return "\n".join(lines)


# --------------------------------------------------------------------------- GPUs


#: SGLang 0.5.23 pins torch 2.14.1 built for CUDA 13, which needs NVIDIA driver R580 or newer
#: (CUDA 13.0 release notes: minimum driver 580.xx on Linux).
MIN_DRIVER_MAJOR = 580


def driver_check(version: str | None) -> Check:
    """The NVIDIA driver branch against :data:`MIN_DRIVER_MAJOR`.

    :param version: ``nvmlSystemGetDriverVersion()`` text such as ``"580.65.06"``; None when
        NVML is unavailable (then ``skip``).
    """
    if version is None:
        return Check("driver", SKIP, "no NVML: driver version unknown")
    try:
        major = int(str(version).split(".")[0])
    except ValueError:
        return Check("driver", WARN, f"unparseable driver version {version!r}")
    if major < MIN_DRIVER_MAJOR:
        return Check("driver", FAIL, f"NVIDIA driver {version} (R{major}); SGLang 0.5.23 runs torch 2.14.1 on "
                     f"CUDA 13, which needs R{MIN_DRIVER_MAJOR} or newer",
                     f"upgrade the node's NVIDIA driver to R{MIN_DRIVER_MAJOR}+ (docs/gpu-node.md)")
    return Check("driver", OK, f"NVIDIA driver {version} (>= R{MIN_DRIVER_MAJOR}, CUDA 13)")


def nvml_driver_version() -> str | None:
    """The driver version from NVML, or None when NVML cannot be used."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def gpu_check(tp_size: int, nnodes: int = 1) -> Check:
    """GPU count, names and free memory (nvidia-ml-py) against ``tp_size / nnodes`` per node."""
    need = max(1, -(-tp_size // nnodes))
    try:
        import pynvml
    except ImportError:
        return Check("gpus", FAIL, "nvidia-ml-py is not installed", "install the lab's dependencies (uv sync)")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded...
        return Check("gpus", FAIL, f"no NVIDIA GPU visible on this machine (NVML: {exc}); "
                     f"engine sglang needs {need} GPU(s) per node for tp_size={tp_size}",
                     "run on a GPU node with the NVIDIA driver loaded, or set engine: emulator")
    try:
        n = pynvml.nvmlDeviceGetCount()
        rows = []
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            rows.append(f"{i}: {name}, {mem.free / 2**30:.0f}/{mem.total / 2**30:.0f} GiB free")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    detail = f"{n} GPU(s), need {need} for tp_size={tp_size}" + (f" over {nnodes} nodes" if nnodes > 1 else "")
    detail += ("; " + "; ".join(rows)) if rows else ""
    if n < need:
        return Check("gpus", FAIL, detail, f"lower model.tp_size to at most {n}, or use a node with {need} GPUs")
    return Check("gpus", OK, detail)


# --------------------------------------------------------------------------- SGLang


def _run_snippet(python: str, snippet: str, stdin: str, timeout_s: float) -> dict[str, Any]:
    """Run ``snippet`` with ``python -c`` and return its ``LAB_PREFLIGHT_RESULT`` JSON."""
    try:
        proc = subprocess.run([python, "-c", snippet], input=stdin, capture_output=True, text=True,
                              timeout=timeout_s, cwd=str(repo_root()))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout_s:g} s"}
    except OSError as exc:
        return {"ok": False, "error": f"cannot run {python}: {exc}"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("LAB_PREFLIGHT_RESULT "):
            return json.loads(line.split(" ", 1)[1])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"ok": False, "error": f"exit code {proc.returncode}: " + " | ".join(tail)}


def sglang_check(python: str = sys.executable, timeout_s: float = ARGV_CHECK_TIMEOUT_S) -> Check:
    """SGLang importable by ``python``, and its version (``sglang.__version__``)."""
    res = _run_snippet(python, _VERSION_SNIPPET, "", timeout_s)
    if not res["ok"]:
        return Check("sglang", FAIL, f"`import sglang` fails in {python}: {res['error']}",
                     ".cache/uv/bin/uv sync --frozen --extra sglang (SGLang 0.5.23), or pip install '.[sglang]' into that Python")
    return Check("sglang", OK, f"{res['version']} ({Path(res['file']).parent})", value=str(res["version"]))


def argv_check(mode: str, flags: list[str], python: str = sys.executable,
               timeout_s: float = ARGV_CHECK_TIMEOUT_S) -> Check:
    """Parse ``flags`` (the launch argv after ``-m sglang.launch_server``) with SGLang's
    ``prepare_server_args`` in a subprocess of ``python``; a rejection or timeout fails."""
    res = _run_snippet(python, _ARGV_SNIPPET, json.dumps(flags), timeout_s)
    name = f"argv[{mode}]"
    if not res["ok"]:
        return Check(name, FAIL, f"SGLang's parser rejected the launch flags: {res['error']}",
                     f"fix modes.{mode} / server.extra_args in params.yaml (flags as in SGLang 0.5.23)")
    shown = ", ".join(f"{k}={v}" for k, v in (res.get("values") or {}).items() if v is not None)
    if not res.get("resolved"):
        return Check(name, WARN, f"accepted by prepare_server_args, but SGLang's resolution failed here "
                     f"({res.get('resolve_error')}); RAW INPUT, not what SGLang will run: {shown}",
                     "run lab doctor on the GPU node with the model in the HF cache to see resolved values")
    return Check(name, OK, f"accepted by prepare_server_args; resolved by {res.get('how', 'resolve_once()')}: {shown}")


# --------------------------------------------------------------------------- weights


def _in_hf_cache(repo_id: str, cache: Path) -> str | None:
    """Where ``repo_id`` has a snapshot in the cache, or None."""
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError:
        scan_cache_dir = None
    if scan_cache_dir is not None:
        try:
            for repo in scan_cache_dir(cache).repos:
                if repo.repo_id == repo_id and repo.repo_type == "model" and repo.revisions:
                    return str(repo.repo_path)
            return None
        except Exception:  # CacheNotFound and friends: fall back to the layout check
            pass
    snaps = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    if snaps.is_dir() and any(any(s.iterdir()) for s in snaps.iterdir() if s.is_dir()):
        return str(snaps.parent)
    return None


def weights_check(label: str, path: str) -> Check:
    """A model path: a local directory with a config.json, or a Hugging Face repo in the cache."""
    name = f"{label}[{path}]"
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / "config.json").is_file():
            return Check(name, OK, f"local directory {p}")
        return Check(name, FAIL, f"local directory {p} has no config.json", "point the path at the model's folder")
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        return Check(name, FAIL, f"{p} does not exist", "fix the path in params.yaml (model.path / draft_path)")
    cache = hf_cache_dir()
    found = _in_hf_cache(path, cache)
    if found:
        return Check(name, OK, f"Hugging Face cache {found}")
    return Check(name, FAIL, f"not a local directory and not in the Hugging Face cache {cache}",
                 f".cache/uv/bin/uv run hf download {path}   (huggingface_hub comes with the sglang extra; gated repos need "
                 "HF_TOKEN; without a download SGLang would fetch it at launch)")


# --------------------------------------------------------------------------- the whole run


def _cheap_checks(eng, server, bench, results_dir: Path) -> list[Check]:
    from lab.workload.dataset import DatasetError
    from lab.workload.sources import check_prompt_count, load_bench_prompts
    from lab.engine.process import ServerError, check_port_free

    checks = []
    s = server
    from lab.engine.ports import port_is_explicit

    try:
        if not port_is_explicit(s) and eng.picks_free_port:
            checks.append(Check("port", OK, f"server.port not set: the {eng.name} takes a free port at launch"))
        else:
            check_port_free(s.host, s.port)
            checks.append(Check("port", OK, f"{s.host}:{s.port} is free"))
    except ServerError as exc:
        checks.append(Check("port", FAIL, str(exc).split(". Fix:")[0],
                            f"stop that process or set server.port (for this run only, leaving params.yaml and "
                            f"dvc status alone: LAB_SERVER_PORT={s.port + 1} dvc repro)"))
    probe = results_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_gb = shutil.disk_usage(probe).free / 2**30
    checks.append(Check("disk", OK if free_gb >= MIN_FREE_DISK_GB else FAIL,
                        f"{free_gb:.1f} GiB free at {probe} (need {MIN_FREE_DISK_GB:g})",
                        "free disk space where results/ lives"))
    try:
        n = len(load_bench_prompts(bench, repo_root())[0])  # a file, or a Hugging Face id
        check_prompt_count(bench, n)
        checks.append(Check("dataset", OK, f"{bench.dataset}: {n} prompts"))
    except DatasetError as exc:
        cause, _, fix = str(exc).partition(". Fix: ")
        checks.append(Check("dataset", FAIL, cause, fix or "see bench.dataset in params.yaml"))
    return checks


def run_preflight(params: LabParams, modes: list[str] | None = None, *, python: str = sys.executable,
                  results_dir: str | os.PathLike[str] | None = None,
                  timeout_s: float = ARGV_CHECK_TIMEOUT_S, check_argv: bool = True) -> PreflightReport:
    """Run every check that applies to ``params.engine`` for ``modes`` (default: all modes).

    :param python: the interpreter that will run the server (its SGLang is checked).
    :param results_dir: where results and logs go (free disk is checked there).
    :param check_argv: parse each mode's argv with SGLang's parser (it imports torch: tens
        of seconds cold). ``lab.pipeline.bench_stage`` passes False for its seconds-long check before the
        notebook starts; the notebook's own preflight then parses the argv.
    :returns: the :class:`PreflightReport` (call ``raise_if_failed`` to stop on failure).
    :raises lab.config.ParamsError: a name in ``modes`` is not in ``params.modes``.
    """
    eng = engine_for(params.engine)
    return preflight_report(eng, {n: params.mode(n) for n in (modes or params.modes)}, model=params.model,
                            server=params.server, bench=params.bench, own=eng.own_section(params), python=python,
                            results_dir=results_dir, timeout_s=timeout_s, check_argv=check_argv)


def preflight_report(eng, modes: dict[str, Any], *, model, server, bench, own=None, python: str = sys.executable,
                     results_dir: str | os.PathLike[str] | None = None, timeout_s: float = ARGV_CHECK_TIMEOUT_S,
                     check_argv: bool = True) -> PreflightReport:
    """:func:`run_preflight` from the engine and the sections the checks read: the engine's own rows
    (:meth:`lab.engine.registry.Engine.preflight`), then port, disk and dataset.

    :param eng: the :class:`lab.engine.registry.Engine`; ``modes``: ``{name: ModeParams}``;
        ``model``, ``server``, ``bench``: those params.yaml sections; ``own``: ``eng.own_section(params)``.
    :param python, results_dir, timeout_s, check_argv: as :func:`run_preflight`'s.
    :returns: the :class:`PreflightReport`.
    """
    out = Path(results_dir) if results_dir is not None else repo_root() / "results"
    checks = eng.preflight(modes, model=model, server=server, bench=bench, own=own, python=python,
                           timeout_s=timeout_s, check_argv=check_argv)
    return PreflightReport(eng.name, checks + _cheap_checks(eng, server, bench, out))


def sglang_checks(eng, modes: dict[str, Any], *, model, server, bench, own=None, python: str = sys.executable,
                  timeout_s: float = ARGV_CHECK_TIMEOUT_S, check_argv: bool = True) -> list[Check]:
    """An SGLang launch's own rows: ``gpus``, ``driver``, ``sglang``, each mode's ``argv``, the
    adaptive-speculation refusals, ``synthetic`` or the ``model`` / ``draft`` weights, ``context``
    and (with this Python) the offline bundle's; :meth:`lab.engine.sglang_engine.Sglang0523.preflight`.

    :param eng: the engine (its flags are each mode's argv); ``modes``: ``{name: ModeParams}``;
        ``model``, ``server``, ``bench``: those params.yaml sections; ``own``: ``eng.own_section(params)``.
    """
    checks: list[Check] = []
    m = model
    checks.append(gpu_check(m.tp_size, getattr(server, "nnodes", 1)))
    checks.append(driver_check(nvml_driver_version()))
    sg = sglang_check(python, timeout_s)
    checks.append(sg)
    flags = {name: launch_command(eng, name, mode, model=model, server=server, own=own, python=python).flags
             for name, mode in modes.items()}
    for mode in modes:
        if sg.status == OK and not check_argv:
            checks.append(Check(f"argv[{mode}]", SKIP, "parsed by SGLang's parser in the stage's notebook, next"))
        elif sg.status == OK:
            checks.append(argv_check(mode, flags[mode], python, timeout_s))
        else:
            checks.append(Check(f"argv[{mode}]", SKIP, "SGLang not importable by this Python: launch flags not "
                                "checked and values NOT resolved (resolution runs SGLang's own code)"))
    if sg.status == OK:
        checks += adaptive_checks(flags, sg.value or "")
    if m.synthetic:
        checks.append(synthetic_check(m.synthetic))
    else:
        checks.append(weights_check("model", m.path))
        drafts = sorted({md.draft_path or m.draft_path for md in modes.values() if md.is_speculative})
        for d in drafts:
            checks.append(weights_check("draft", str(d)))
    checks.append(context_row(eng, modes, model=model, server=server, bench=bench, own=own))
    if python == sys.executable:
        checks += bundle_checks(flags)
    return checks


def adaptive_checks(flags_by_mode: dict[str, list[str]], version: str) -> list[Check]:
    """One ``adaptive[<mode>]`` check per mode launched with ``--speculative-adaptive``: FAIL where
    SGLang ``version`` would refuse or crash the launch (:func:`lab.engine.adaptive_rules.adaptive_launch_refusal`),
    before a GPU spends minutes on it."""
    from lab.engine.adaptive_rules import adaptive_launch_refusal

    out = []
    for mode, flags in flags_by_mode.items():
        if "--speculative-adaptive" not in flags:
            continue
        try:
            why = adaptive_launch_refusal(flags, version)
        except (OSError, ValueError) as exc:  # a bad config file (AdaptiveConfigError is a ValueError)
            why = f"--speculative-adaptive-config: {exc}"
        out.append(Check(f"adaptive[{mode}]", FAIL, why, f"fix modes.{mode} in params.yaml") if why else
                   Check(f"adaptive[{mode}]", OK, f"num_steps among the tiers' candidates; SGLang {version} captures them"))
    return out


def context_check(params: LabParams, modes: list[str]) -> Check:
    """``bench.context_tokens`` against the served model's context length
    (:func:`lab.engine.window.context_window_problems`): FAIL naming each length that SGLang
    would refuse and the fix, ``skip`` when a real model's config is not readable here
    (:func:`context_row` of ``params``' engine and sections)."""
    eng = engine_for(params.engine)
    return context_row(eng, {n: params.mode(n) for n in (modes or params.modes)}, model=params.model, server=params.server,
                       bench=params.bench, own=eng.own_section(params))


def context_row(eng, modes: dict[str, Any], *, model, server, bench, own=None) -> Check:
    """:func:`context_check` from the engine and sections: ``modes`` ``{name: ModeParams}``,
    ``model``, ``server``, ``bench`` those params.yaml sections, ``own`` ``eng.own_section(params)``."""
    from lab.engine.window import window_of, window_problems

    win = window_of(eng, model=model, server=server, own=own)
    problems = window_problems(win, list(modes.values()), bench)
    longest = max(bench.context_tokens)
    if win.tokens is None:
        return Check("context", SKIP, f"context length not known before launch ({win.source}); "
                     "SGLang refuses too long requests at request time")
    if problems:
        return Check("context", FAIL, "; ".join(p.split(". Fix:")[0] for p in problems),
                     problems[0].split(". Fix: ")[-1])
    return Check("context", OK, f"longest context {longest} tokens + outputs fit {win.tokens} ({win.source})")


def synthetic_check(preset: str) -> Check:
    """Write (once) the synthetic model's folders (:func:`lab.engine.synthetic.write_model`)."""
    from lab.engine.synthetic import SyntheticError, describe, write_model

    try:
        d = write_model(preset, repo_root())
    except SyntheticError as exc:
        return Check("model", FAIL, str(exc).split(". Fix:")[0], str(exc).split(". Fix: ")[-1])
    info = describe(preset)
    return Check("model", OK, f"synthetic {preset} ({info['num_hidden_layers']} layers, hidden {info['hidden_size']}, "
                 f"vocab {info['vocab_size']}): {d}; RANDOM weights (--load-format dummy)")


def bundle_checks(flags_by_mode: dict[str, list[str]], site: Path | None = None) -> list[Check]:
    """With an offline bundle installed (:mod:`lab.offline.install` wrote ``lab-bundle.json``
    into this interpreter's site-packages): each mode's launch carries the flags the bundle
    needs (``--grammar-backend none`` with the xgrammar stand-in, a non-fa3
    ``--attention-backend`` without fa3's library). No bundle: no rows."""
    import sysconfig

    rec = Path(site or sysconfig.get_paths()["purelib"]) / "lab-bundle.json"
    if not rec.exists():
        return []
    info = json.loads(rec.read_text())
    sg = info.get("sglang", {})
    rows = [Check("bundle", OK if not info.get("missing_parts") else FAIL,
                  f"offline bundle: SGLang {sg.get('version')} set, {len(info.get('parts', []))} parts installed"
                  + (f"; missing {', '.join(info['missing_parts'])}" if info.get("missing_parts") else ""),
                  "copy the missing parts beside bundle.json and run python3 -m lab.offline.install again"
                  if info.get("missing_parts") else "")]
    for mode, flags in flags_by_mode.items():
        bad = []
        for flag, allowed in (sg.get("requires_flags") or {}).items():
            val = flag_value(flags, flag)
            if val not in allowed:
                bad.append(f"{flag} {'/'.join(allowed)} ({'not set' if val is None else 'have ' + val})")
        if bad:
            rows.append(Check(f"bundle[{mode}]", FAIL, "this bundle needs " + "; ".join(bad),
                              "add them to server.extra_args in params.yaml (e.g. configs/h200/params-*.yaml)"))
    return rows
