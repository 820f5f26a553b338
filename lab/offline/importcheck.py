"""List every module SGLang's serving path cannot import, in one pass (``python -m
lab.offline.importcheck``): on a ``ModuleNotFoundError`` an empty stand-in goes into a scratch
folder (this process only) and the import is retried, so one run names all that a bundle lacks.
After ``shared/real-sglang/find_missing.py``, which found the import-time needs of SGLang 0.5.16
on the H200 image. Exit 0 when nothing is missing, 1 otherwise.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile

__all__ = ["SERVING_MODULES", "missing_modules", "main"]

#: What ``python -m sglang.launch_server`` imports for a DeepSeek-V3 / Llama target with an
#: EAGLE-3 draft under the triton backend (SGLang 0.5.16 module paths).
SERVING_MODULES = (
    "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
    "sglang.srt.model_executor.model_runner", "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.models.deepseek_v2", "sglang.srt.models.llama", "sglang.srt.models.llama_eagle3",
    "sglang.srt.layers.attention.triton_backend", "sglang.srt.layers.sampler",
    "sglang.srt.managers.detokenizer_manager", "sglang.srt.managers.tokenizer_manager",
)


def missing_modules(modules: tuple[str, ...] = SERVING_MODULES, log=print) -> tuple[list[str], list[str]]:
    """``(missing module names, other import errors)`` for ``modules``."""
    scratch = tempfile.mkdtemp(prefix="lab-importcheck-")
    sys.path.append(scratch)
    missing: list[str] = []
    errors: list[str] = []
    for mod in modules:
        for _ in range(40):
            try:
                importlib.import_module(mod)
                break
            except ModuleNotFoundError as exc:
                name = exc.name or str(exc)
                if name in missing or name.startswith("sglang"):
                    errors.append(f"{mod}: cannot stand in for {name}: {exc}")
                    break
                missing.append(name)
                path = os.path.join(scratch, *name.split("."))
                os.makedirs(path, exist_ok=True)
                open(os.path.join(path, "__init__.py"), "w").close()
                for k in [k for k in sys.modules if k == mod or k.startswith(mod + ".")]:
                    sys.modules.pop(k, None)
            except Exception as exc:  # noqa: BLE001 - report, do not stop
                errors.append(f"{mod}: {type(exc).__name__}: {str(exc)[:300]}")
                break
    return missing, errors


def main() -> int:
    missing, errors = missing_modules()
    print("MISSING:", missing)
    for e in errors:
        print("ERROR:", e)
    return 1 if missing or errors else 0


if __name__ == "__main__":
    sys.exit(main())
