"""The engines the lab can launch, each one class registered once (as guidellm registers its
backends: ``@Backend.register("openai_http")``): :func:`register` files a class under its
``params.engine`` name (and, for a build whose surfaces differ, its version), and
:func:`engine_for` is the only way the lab asks about an engine.

An :class:`Engine` builds its argv and environment (:meth:`Engine.flags`, :meth:`Engine.argv`,
:meth:`Engine.env`), runs its preflight (:meth:`Engine.preflight`), tags its version
(:meth:`Engine.version_tags`), captures its environment (:meth:`Engine.capture_environment`),
describes what it serves (:attr:`Engine.surface`, :mod:`lab.engine.surfaces`) and names the
function the lab's client sends requests with (:attr:`Engine.request_function`). Its traits
(:attr:`Engine.modelled`, :attr:`Engine.ground_truth`, :attr:`Engine.holds_gpus`,
:attr:`Engine.params_section`, :attr:`Engine.picks_free_port`) answer everything else the lab
asks: nothing outside ``lab/engine/`` compares an engine's name (``tests/unit/test_layout.py``).

The built-in engines live in :mod:`lab.engine.emulator_engine` (the emulator) and
:mod:`lab.engine.sglang_engine` (SGLang 0.5.23 and 0.5.16); the ``lab.engine`` package imports
both, so they are registered before any module of it runs. A new engine is one module with one
``@register("name")`` line, imported once (``tests/component/test_third_engine.py``).

This module imports no lab module but :mod:`lab.config.schema` (the engine modules import it),
so it can never close an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from lab.config.schema import ParamsError

__all__ = ["Engine", "ENGINES", "register", "engine_for", "engine_named", "engine_names", "provenance",
           "version_tuple", "any_modelled", "EngineError", "find_engine"]


class EngineError(ParamsError):
    """``params.engine`` names no registered engine (the message names the registered ones and the
    fix); a :class:`lab.config.ParamsError`, so every command reports it as bad params."""


class Engine:
    """One engine kind (one build of it, where builds serve different surfaces).

    Subclasses set the class attributes and implement the methods that raise
    :class:`NotImplementedError`; instances carry no state (``engine_for`` makes a fresh one).

    :cvar name: the ``params.engine`` value it is registered under (set by :func:`register`).
    :cvar version: the build whose surfaces it describes (``"0.5.16"``), None for a versionless one.
    :cvar modelled: its timings come from a cost profile, not a GPU (results, captions and MLflow
        say "modelled"/"emulator"; such numbers are never GPU numbers).
    :cvar ground_truth: it records what it actually did (``ground_truth.jsonl``), which the lab's
        own measurement is checked against.
    :cvar holds_gpus: its process group holds GPU memory the next launch must wait for.
    :cvar params_section: the params.yaml section only this engine reads (logged with its runs), or None.
    :cvar picks_free_port: with ``server.port`` unset it listens on a free port taken at launch
        (:func:`lab.engine.ports.launch_port`) instead of the schema's default.
    :cvar module: what ``python -m`` runs to serve it.
    :cvar surface: what it serves where the lab reads it (:class:`lab.engine.surfaces.SglangSurface`).
    :cvar launch_spread_priors: documented launch-to-launch spread of decode tok/s per cost
        profile, ``{profile: (cv, n launches, source)}`` (:func:`lab.analysis.launches.prior_spread`).
    :cvar label: how notes and captions name it (``"SGLang"``); default its name.
    :cvar request_function: ``"module:function"`` the lab's client sends a batch of requests with
        (:func:`lab.measure.client.request_function` resolves it).
    """

    name: ClassVar[str] = ""
    version: ClassVar[str | None] = None
    modelled: ClassVar[bool] = False
    ground_truth: ClassVar[bool] = False
    holds_gpus: ClassVar[bool] = False
    params_section: ClassVar[str | None] = None
    picks_free_port: ClassVar[bool] = False
    module: ClassVar[str] = ""
    surface: ClassVar[Any] = None
    request_function: ClassVar[str] = "lab.measure.client:run_requests_sync"
    label: ClassVar[str] = ""
    launch_spread_priors: ClassVar[dict[str, tuple[float, int, str]]] = {}

    def own_section(self, params: Any) -> Any:
        """This engine's own params.yaml section (``params.<params_section>``: the emulator's
        ``params.emulator``), or None for an engine without one. What a stage hands the engine's
        methods as ``own``, so that they never need the whole params object."""
        return getattr(params, self.params_section) if self.params_section else None

    def flags(self, mode_name: str, *, mode: Any, model: Any, server: Any) -> list[str]:
        """The launch flags of ``mode_name`` (after ``python -m <module>``).

        :param mode: its :class:`lab.config.ModeParams`; ``model``, ``server``: ``params.model``,
            ``params.server`` (the port already the launch's).
        """
        raise NotImplementedError(f"engine {self.name!r} does not build its flags")

    def argv(self, mode_name: str, flags: list[str], *, python: str, own: Any = None,
             ground_truth_file: str | None = None, prompt_file: str | None = None) -> list[str]:
        """The whole argv: ``python -m <module> <flags>`` unless the engine adds its own.

        :param own: :meth:`own_section` (None without one).
        :param ground_truth_file: where an engine with :attr:`ground_truth` writes what it did.
        :param prompt_file: the JSONL prompts (an engine that models per-category acceptance reads it).
        """
        return [python, "-m", self.module, *flags]

    def env(self, mode_name: str, *, mode: Any, server: Any) -> dict[str, str]:
        """Variables added to the inherited environment of ``mode_name``'s launch (``mode``: its
        :class:`lab.config.ModeParams`; ``server``: ``params.server``)."""
        raise NotImplementedError(f"engine {self.name!r} does not build its environment")

    def preflight(self, modes: Mapping[str, Any], *, model: Any, server: Any, bench: Any, own: Any,
                  python: str, timeout_s: float, check_argv: bool) -> list[Any]:
        """This engine's own preflight rows (:class:`lab.engine.preflight.Check`); the port, disk and
        dataset rows every engine gets are :func:`lab.engine.preflight.run_preflight`'s.

        :param modes: ``{name: ModeParams}`` of the modes to check; ``model``, ``server``, ``bench``:
            those params.yaml sections; ``own``: :meth:`own_section`.
        """
        raise NotImplementedError(f"engine {self.name!r} has no preflight")

    def version_tags(self, server_info: Any, python: str | None = None) -> dict[str, str]:
        """MLflow tags naming the build that ran (``sglang_version`` ...)."""
        raise NotImplementedError(f"engine {self.name!r} does not tag its version")

    def capture_environment(self, python: str, write: Any) -> tuple[dict[str, str], Any]:
        """The engine's own part of :func:`lab.engine.envcapture.capture_environment`: files written
        through ``write(name, text)``; returns ``(tags, versions entry)``."""
        return {}, f"not applicable: engine {self.name}"

    def input_files(self, own: Any, root: Any) -> dict[str, Any]:
        """``{param: absolute path}`` of the files only this engine reads (:func:`lab.inputs.param_files`),
        from ``own`` (:meth:`own_section`); relative paths resolve against ``root``."""
        return {}

    def launch_refusal(self, flags: list[str]) -> str | None:
        """Why the installed build would refuse or crash a launch with ``flags`` (checked before a
        launch that costs minutes), or None."""
        return None

    def cost_profile(self, own: Any) -> str | None:
        """The cost profile a modelled engine's timings come from (tagged ``emulator_profile``,
        named in captions), read from ``own`` (:meth:`own_section`), None for a measured one."""
        return None

    def launch_setup(self, own: Any) -> dict[str, Any]:
        """The engine's own settings (from ``own``, :meth:`own_section`) that shape a launch beside
        its flags (hashed by the regression sentinel: :func:`lab.pipeline.bench.launch_setup`)."""
        return {}

    def prompt_counter(self) -> Any:
        """Its own prompt-length counter (``text -> tokens``), or None: the served model's
        tokenizer counts (:func:`lab.engine.tokenizer.token_counter`)."""
        return None

    def context_window(self, own: Any) -> tuple[int | None, str] | None:
        """The context window the engine serves when neither ``server.context_length`` nor a
        synthetic model sets it: ``(tokens, where read)``, or None to read the served model's config
        (:func:`lab.engine.window.served_window`); ``own``: :meth:`own_section`."""
        return None

    def at_version(self, version: str | None) -> tuple["Engine", str | None]:
        """The registered build of this engine whose surfaces apply to ``version``.

        :returns: ``(engine, note)``: the newest build not newer than ``version``; the note says when
            ``version`` is not one the lab was checked against (None when it is). An unknown or
            missing version gets the newest build, with a note. A versionless engine is itself.
        """
        builds = ENGINES[self.name]
        if None in builds:
            return builds[None](), None
        known = sorted(builds, key=version_tuple)
        if version and str(version) in builds:
            return builds[str(version)](), None
        try:
            v = version_tuple(version or "")
        except ValueError:
            v = ()
        older = [k for k in known if v and version_tuple(k) <= v]
        pick = older[-1] if older else known[-1]
        return builds[pick](), (f"{self.label} {version or 'of unknown version'} is not a build the lab was checked "
                                f"against; read with the {pick} contract")

    def __repr__(self) -> str:
        return f"<engine {self.name}{' ' + self.version if self.version else ''}>"


#: ``name -> {version (None: versionless) -> class}``, filled by :func:`register`.
ENGINES: dict[str, dict[str | None, type[Engine]]] = {}


def register(name: str, version: str | None = None):
    """Class decorator: file an :class:`Engine` subclass under ``params.engine`` = ``name``
    (and ``version``, for one build of an engine whose builds serve different surfaces).

    :raises ValueError: that name (and version) is registered already, or a versionless and a
        versioned build would share a name.
    """
    def deco(cls: type[Engine]) -> type[Engine]:
        builds = ENGINES.setdefault(name, {})
        if version in builds or (builds and (version is None) != (None in builds)):
            raise ValueError(f"engine {name!r}{' ' + version if version else ''} is registered already "
                             f"(by {next(iter(builds.values())).__module__})")
        cls.name, cls.version = name, version
        cls.label = cls.label or name
        builds[version] = cls
        return cls

    return deco


def engine_names() -> list[str]:
    """The registered ``params.engine`` values, sorted."""
    return sorted(ENGINES)


def engine_named(name: str) -> Engine:
    """The engine registered as ``name``: its newest build for a versioned one (pick a build with
    :meth:`Engine.at_version`).

    :raises EngineError: no engine is registered as ``name`` (names the registered ones and the fix).
    """
    builds = ENGINES.get(str(name))
    if not builds:
        raise EngineError(f"engine: {name!r} is not a registered engine. Fix: set engine to one of "
                          f"{', '.join(engine_names())} (or register one: lab/engine/registry.py)")
    if None in builds:
        return builds[None]()
    return builds[max(builds, key=version_tuple)]()


def find_engine(name: Any) -> Engine | None:
    """The engine registered as ``name`` (as :func:`engine_named`), or None for a name the registry
    does not hold (a result recorded by an engine not registered here)."""
    return engine_named(str(name)) if str(name) in ENGINES else None


def engine_for(params_or_name: Any) -> Engine:
    """The :class:`Engine` of ``params.engine`` (or of a name); see :func:`engine_named`.

    :raises EngineError: an engine the registry does not hold.
    """
    return engine_named(params_or_name if isinstance(params_or_name, str) else params_or_name.engine)


def any_modelled(names: Any) -> bool:
    """Whether any of ``names`` (engine names as recorded, e.g. a result's ``engine``; unknown
    names count as not modelled) is a modelled engine."""
    return any((e := find_engine(n)) is not None and e.modelled for n in names)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.16"`` -> ``(0, 5, 16)``; suffixes (``.post1``, ``rc0``) are dropped."""
    return tuple(int(p) for p in re.findall(r"\d+", str(version).split("+")[0])[:3])


def provenance(params: Any, mode_name: str | None = None) -> dict[str, Any]:
    """What a result's numbers stand on, for every CSV, summary, caption and MLflow tag:

    - ``engine``: ``params.engine`` (``emulator``, ``sglang``);
    - ``timing``: ``modelled`` (the emulator's cost profile) or ``measured`` (a real server);
    - ``weights``: ``emulated`` (no model at all), ``random`` (``model.synthetic``:
      ``--load-format dummy``) or ``real``;
    - ``acceptance``: ``emulated`` (the profile's acceptance model), ``simulated``
      (``SGLANG_SIMULATE_ACC_LEN`` pins it: draft tokens accepted unverified) or ``real``;
      for a plain-decoding mode ``n/a``; with no mode named, the modes' acceptances joined.
    """
    eng = engine_for(params.engine)
    if eng.modelled:
        weights = "emulated"
    else:
        weights = "random" if params.model.synthetic else "real"

    def acc(m) -> str:
        if not m.is_speculative:
            return "n/a"
        if eng.modelled:
            return "emulated"
        return "simulated" if m.simulate_accept_length is not None else "real"

    if mode_name is not None:
        acceptance = acc(params.mode(mode_name))
    else:
        kinds = sorted({acc(m) for m in params.modes.values()} - {"n/a"})
        acceptance = "/".join(kinds) or "n/a"
    return {"engine": eng.name, "timing": "modelled" if eng.modelled else "measured", "weights": weights,
            "acceptance": acceptance}
