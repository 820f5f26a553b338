"""README's test command installs Chromium when it is missing (``scripts/need-chromium.sh``).

Each case runs the script with a PATH holding only stand-ins (``id`` saying who we are,
``apt-get`` recording its arguments and, on ``install chromium``, putting a ``chromium`` on
PATH, ``sudo`` recording how it was called), so the branch a fresh machine takes runs here
even where a real Chromium is installed: root installs directly, a user goes through sudo
(``sudo -n`` without a terminal), and with no sudo or no apt-get the script stops with the fix.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "need-chromium.sh"


def _stub(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _run(tmp_path: Path, *, uid: int, sudo: bool = True, apt: bool = True, chromium: bool = False,
         apt_fails: bool = False) -> tuple[subprocess.CompletedProcess, str]:
    bindir, log = tmp_path / "bin", tmp_path / "calls.log"
    bindir.mkdir()
    os.symlink("/usr/bin/env", bindir / "env")
    _stub(bindir, "id", f'echo {uid}\n')
    if apt:
        _stub(bindir, "apt-get", f'echo "apt-get $*" >> {log}\n'
                                 + ("exit 100\n" if apt_fails else "")
                                 + f'case "$*" in *"install -y -qq chromium"*) printf "#!/bin/sh\\n" > {bindir}/chromium;'
                                 f' /bin/chmod +x {bindir}/chromium;; esac\n')
    if sudo:
        _stub(bindir, "sudo", f'echo "sudo $*" >> {log}\n[ "$1" = -n ] && shift\nexec "$@"\n')
    if chromium:
        _stub(bindir, "chromium", "")
    proc = subprocess.run(["/bin/sh", str(SCRIPT)], env={"PATH": str(bindir)}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    return proc, log.read_text() if log.exists() else ""


def test_present_chromium_installs_nothing(tmp_path):
    proc, calls = _run(tmp_path, uid=0, chromium=True)
    assert proc.returncode == 0 and calls == ""


def test_root_installs_the_debian_package(tmp_path):
    proc, calls = _run(tmp_path, uid=0, sudo=False)
    assert proc.returncode == 0, proc.stderr
    assert calls.splitlines() == ["apt-get update -qq", "apt-get install -y -qq chromium"]
    assert (tmp_path / "bin" / "chromium").exists()


def test_user_installs_through_sudo_without_a_password_prompt(tmp_path):
    proc, calls = _run(tmp_path, uid=1000)
    assert proc.returncode == 0, proc.stderr
    lines = calls.splitlines()
    assert lines[0] == "sudo -n apt-get update -qq" and "apt-get install -y -qq chromium" in lines[-1]
    assert lines[-2].startswith("sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install")


@pytest.mark.parametrize("case, expect", [
    ({"uid": 1000, "sudo": False}, "sudo is missing"),
    ({"uid": 0, "apt": False}, "no apt-get"),
    ({"uid": 0, "apt_fails": True}, "apt-get install -y chromium` failed"),
])
def test_no_way_to_install_stops_with_the_fix(tmp_path, case, expect):
    proc, _ = _run(tmp_path, **case)
    assert proc.returncode == 1
    assert expect in proc.stderr and "Fix:" in proc.stderr, proc.stderr
