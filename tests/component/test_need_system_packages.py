"""README's test command installs the system packages the tests need when they are missing
(``scripts/need-system-packages.sh``): Chromium (browser tests) and Slurm with munge (the fleet
tests' single-node cluster).

Each case runs the script with a PATH holding only stand-ins (``id`` saying who we are,
``apt-get`` recording its arguments and, on ``install``, putting the named packages' commands on
PATH, ``sudo`` recording how it was called) and no sbin directory searched
(``LAB_SBIN_DIRS`` empty), so the branch a fresh machine takes runs here even where the real
packages are installed: only what is missing is installed, root installs directly, a user goes
through sudo (``sudo -n`` without a terminal), and with no sudo, no apt-get or a failing install
the script stops with the fix.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "need-system-packages.sh"
#: The commands each Debian package provides that the tests look for.
PROVIDES = {"chromium": ["chromium"],
            "slurm-wlm": ["slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo"],
            "munge": ["munged"]}
ALL = list(PROVIDES)


def _stub(bindir: Path, name: str, body: str = "") -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _run(tmp_path: Path, *, uid: int, present: tuple[str, ...] = (), sudo: bool = True, apt: bool = True,
         apt_fails: bool = False, installs_nothing: bool = False) -> tuple[subprocess.CompletedProcess, str]:
    bindir, log = tmp_path / "bin", tmp_path / "calls.log"
    bindir.mkdir()
    os.symlink("/usr/bin/env", bindir / "env")
    _stub(bindir, "id", f'echo {uid}\n')
    if apt:  # `install` puts each named package's commands on PATH (unless it installs nothing)
        install = "" if installs_nothing else "".join(
            f'case " $* " in *" {pkg} "*) for c in {" ".join(cmds)}; do printf "#!/bin/sh\\n" > {bindir}/$c; '
            f'/bin/chmod +x {bindir}/$c; done;; esac\n' for pkg, cmds in PROVIDES.items())
        _stub(bindir, "apt-get", f'echo "apt-get $*" >> {log}\n' + ("exit 100\n" if apt_fails else "")
              + f'case "$*" in *install*)\n{install};; esac\n')
    if sudo:
        _stub(bindir, "sudo", f'echo "sudo $*" >> {log}\n[ "$1" = -n ] && shift\nexec "$@"\n')
    for pkg in present:
        for cmd in PROVIDES[pkg]:
            _stub(bindir, cmd)
    proc = subprocess.run(["/bin/sh", str(SCRIPT)], env={"PATH": str(bindir), "LAB_SBIN_DIRS": ""},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    return proc, log.read_text() if log.exists() else ""


def test_present_packages_install_nothing(tmp_path):
    proc, calls = _run(tmp_path, uid=0, present=tuple(ALL))
    assert proc.returncode == 0 and calls == "" and proc.stderr == ""


@pytest.mark.parametrize("present, wanted", [((), ALL), (("chromium",), ["slurm-wlm", "munge"]),
                                             (("slurm-wlm", "munge"), ["chromium"])])
def test_root_installs_only_the_missing_debian_packages(tmp_path, present, wanted):
    proc, calls = _run(tmp_path, uid=0, sudo=False, present=present)
    assert proc.returncode == 0, proc.stderr
    assert calls.splitlines() == ["apt-get update -qq", f"apt-get install -y -qq {' '.join(wanted)}"]
    assert all((tmp_path / "bin" / c).exists() for pkg in ALL for c in PROVIDES[pkg])


def test_user_installs_through_sudo_without_a_password_prompt(tmp_path):
    proc, calls = _run(tmp_path, uid=1000)
    assert proc.returncode == 0, proc.stderr
    lines = calls.splitlines()
    assert lines[0] == "sudo -n apt-get update -qq" and "apt-get install -y -qq chromium slurm-wlm munge" in lines[-1]
    assert lines[-2].startswith("sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install")


@pytest.mark.parametrize("case, expect", [
    ({"uid": 1000, "sudo": False}, "sudo is missing"),
    ({"uid": 0, "apt": False}, "no apt-get"),
    ({"uid": 0, "apt_fails": True}, "apt-get install -y chromium slurm-wlm munge` failed"),
    ({"uid": 0, "installs_nothing": True, "present": ("chromium",)}, "commands of slurm-wlm munge are still not found"),
])
def test_no_way_to_install_stops_with_the_fix(tmp_path, case, expect):
    proc, _ = _run(tmp_path, **case)
    assert proc.returncode == 1
    assert expect in proc.stderr and "Fix:" in proc.stderr, proc.stderr
