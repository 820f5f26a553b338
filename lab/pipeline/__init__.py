"""Orchestration: the DVC stage entry point (stage), one mode's benchmark (bench), interrupt handling (interrupt), the `lab` CLI (cli) and sweep expansion (sweep)."""
