"""lab.pipeline.interrupt's launcher chain without a stage: a child run through a shell that does
not exec still sees its real launcher, and dies with it (the stages themselves:
tests/e2e/test_interrupt.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from scratch import dvc_env
from reliability_util import ROOT

pytestmark = pytest.mark.integration

_env = dvc_env


# DVC runs a stage as [$SHELL, -c, cmd] (dvc/stage/run.py). dash and bash exec a lone
# command, so the stage's parent is dvc; a shell that does not stays alive as the stage's
# parent when dvc dies (what CI's machine did). This wrapper is such a shell.
NOEXEC_SHELL = '#!/bin/sh\n/bin/sh "$@"\nstatus=$?\nexit $status\n'


def test_launcher_chain_sees_through_a_shell_that_does_not_exec(tmp_path):
    """Unit check of lab.pipeline.interrupt.launcher_chain/die_with_launcher without a stage: a
    child run as `sh wrapper -c ...` under a non-shell parent names that parent last, and
    its watcher signals the child once the non-shell launcher is gone."""
    wrapper = tmp_path / "sh"
    wrapper.write_text(NOEXEC_SHELL)
    wrapper.chmod(0o755)
    probe = ("import json, signal, sys, time; from lab.pipeline.interrupt import launcher_chain, die_with_launcher; "
             "signal.signal(signal.SIGTERM, lambda *a: (print('SIGTERM', flush=True), sys.exit(0))); "
             "print(json.dumps([p.name() for p in launcher_chain()]), json.dumps(die_with_launcher(poll_s=0.1)), "
             "sep='\\t', flush=True); time.sleep(30)")
    # launcher: a python that starts the wrapper shell, then waits to be killed
    launcher = ("import subprocess, sys, time; p = subprocess.Popen([sys.argv[1], '-c', sys.argv[2]]); "
                "time.sleep(60)")
    env = {**_env(), "DVC_STAGE": "bench@test"}
    out_file = tmp_path / "out.txt"
    cmd = f"{sys.executable} -c \"{probe}\" > {out_file}"
    proc = subprocess.Popen([sys.executable, "-c", launcher, str(wrapper), cmd], cwd=ROOT, env=env)
    try:
        end = time.monotonic() + 60
        while (not out_file.exists() or not out_file.read_text().strip()) and time.monotonic() < end:
            time.sleep(0.1)
        names_json, watched_json = out_file.read_text().split("\n")[0].split("\t")
        names, watched = json.loads(names_json), json.loads(watched_json)
        assert names[-1].startswith("python") and set(names[:-1]) <= {"sh", "dash"} and len(names) >= 2, names
        assert proc.pid in watched  # the launcher, above the stage's parent shell
        proc.kill()
        proc.wait()
        end = time.monotonic() + 10
        while "SIGTERM" not in out_file.read_text() and time.monotonic() < end:
            time.sleep(0.1)
        assert "SIGTERM" in out_file.read_text(), "the launcher died but the stage was not told"
    finally:
        proc.kill()
