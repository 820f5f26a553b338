"""The serving engine: each engine one class (registry: the emulator in emulator_engine, SGLang
0.5.23 and 0.5.16 in sglang_engine, registered here on first import of the package), build its
command (command) and run its process group (process), pick a free port (ports), check the node
before launch (preflight), follow startup (startup), read back the configuration the engine
really ran (effective) and what it serves (surfaces), capture the environment (envcapture),
sample the GPU (telemetry, gpumem)."""

from lab.engine import emulator_engine, sglang_engine  # noqa: F401 - registers the built-in engines
