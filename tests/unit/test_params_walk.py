"""scripts/params_walk.py: how far the whole params object travels from the bench stage's entry.

Issue 31 item 3 ("stages hand down what they use"): followed from ``lab.pipeline.bench:run_mode``,
the params object visits at most 10 modules ("rooms") with at most 10 re-entries ("returns"),
counted by the walk that also follows ``Class.method(...)`` calls and every engine class's methods.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from shared import load_script

ROOT = Path(__file__).resolve().parents[2]


def _walk_module():
    return load_script(ROOT / "scripts" / "params_walk.py")


def test_run_mode_hands_down_sections_not_the_whole_params():
    w = _walk_module().walk(ROOT, "lab.pipeline.bench:run_mode", "params")
    assert ("lab.pipeline.bench", "run_mode") in w["functions"]  # the walk started where it should
    assert len(w["modules"]) <= 10, w["modules"]
    assert len(w["reentries"]) <= 10, w["reentries"]
    # the engine's methods take their sections: none of the engine classes' modules receives params
    assert not {"lab.engine.emulator_engine", "lab.engine.sglang_engine"} & set(w["modules"]), w["modules"]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_walk_follows_classmethods_staticmethods_and_every_engines_methods(tmp_path):
    root = _tree(tmp_path, {
        "lab/__init__.py": "",
        "lab/engine/__init__.py": "",
        "lab/engine/registry.py": """
            class Engine:
                def argv(self, params):
                    return []

            def register(name):
                return lambda cls: cls

            def engine_for(name):
                return Engine()
            """,
        "lab/engine/fast.py": """
            from lab.engine.registry import Engine, register
            from lab.store import Store

            @register("fast")
            class Fast(Engine):
                def argv(self, params):
                    return Store.keep(params)
            """,
        "lab/engine/slow.py": """
            from lab.engine import registry

            class Slow(registry.Engine):
                def argv(self, p):
                    return [p]
            """,
        "lab/store.py": """
            class Store:
                @staticmethod
                def keep(params):
                    return params
            """,
        "lab/tracker.py": """
            class Tracker:
                def __init__(self, uri):
                    self.uri = uri

                @classmethod
                def from_params(cls, params, root=None):
                    return cls(params.uri)
            """,
        "lab/stage.py": """
            from lab.engine.registry import engine_for
            from lab.tracker import Tracker

            def run(params):
                t = Tracker.from_params(params, "/")
                return engine_for(params.engine).argv(params), t

            def other(params):
                return params.engine.argv(params.bench)  # a section is not the object
            """,
    })
    w = _walk_module().walk(root, "lab.stage:run", "params")
    funcs = set(w["functions"])
    # the classmethod: params lands on its second declared parameter (after cls)
    assert ("lab.tracker", "Tracker.from_params") in funcs
    # <expr>.argv(params): every engine class's own argv, the base class's included
    assert {("lab.engine.registry", "Engine.argv"), ("lab.engine.fast", "Fast.argv"),
            ("lab.engine.slow", "Slow.argv")} <= funcs
    # a staticmethod called through its class from inside an engine: offset 0
    assert ("lab.store", "Store.keep") in funcs
    assert set(w["modules"]) == {"lab.stage", "lab.tracker", "lab.engine.registry", "lab.engine.fast",
                                 "lab.engine.slow", "lab.store"}
    assert not w["reentries"]  # no module was left and entered again
    # a section passed on is not followed
    assert _walk_module().walk(root, "lab.stage:other", "params")["modules"] == ["lab.stage"]


def test_a_return_into_a_module_entered_before_is_a_reentry(tmp_path):
    root = _tree(tmp_path, {
        "lab/__init__.py": "",
        "lab/a.py": """
            from lab import b

            def start(params):
                return b.go(params)

            def back(params):
                return params
            """,
        "lab/b.py": """
            from lab.a import back

            def go(params):
                return back(params)
            """,
    })
    w = _walk_module().walk(root, "lab.a:start", "params")
    assert w["modules"] == ["lab.a", "lab.b"]
    assert w["reentries"] == [(("lab.b", "go"), ("lab.a", "back"))]
