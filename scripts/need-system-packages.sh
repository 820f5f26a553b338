#!/bin/sh
# The system packages the tests need that no PyPI package ships, installed when missing:
#   chromium         the browser tests (the HTML report, the MLflow UI, JupyterLab: tests/browser.py)
#   slurm-wlm, munge the fleet tests, which start a single-node Slurm cluster of their own
#                    (slurmctld, slurmd, munged and the client commands: tests/e2e/slurm_cluster.py)
# (PostgreSQL is the locked pgserver wheel's: nothing to install.) README's test command runs
# this first. It installs only the packages whose commands are missing, as Debian packages with
# apt-get: directly as root, through sudo otherwise (sudo asks for a password on a terminal;
# without one, `sudo -n`, it must not need one). Anything else stops here with what to do,
# before the tests start.
# Daemons live in sbin, often not on a user's PATH: the directories in LAB_SBIN_DIRS
# (default /usr/sbin:/sbin) are searched too.
# usage: sh scripts/need-system-packages.sh
SBIN=${LAB_SBIN_DIRS-/usr/sbin:/sbin}
PATH="$PATH${SBIN:+:$SBIN}"
export PATH

have() {  # any of the commands
  for exe in "$@"; do command -v "$exe" >/dev/null 2>&1 && return 0; done
  return 1
}
have_all() {
  for exe in "$@"; do command -v "$exe" >/dev/null 2>&1 || return 1; done
  return 0
}
# package: the commands the tests need from it
CHROMIUM="chromium chromium-browser google-chrome"  # any one
SLURM="slurmctld slurmd sbatch squeue scontrol scancel sinfo"  # all
MUNGE="munged"
missing() {
  m=""
  have $CHROMIUM || m="$m chromium"
  have_all $SLURM || m="$m slurm-wlm"
  have_all $MUNGE || m="$m munge"
  echo "${m# }"
}

pkgs=$(missing)
[ -z "$pkgs" ] && exit 0
fail() {
  echo "error: the tests need the system packages $pkgs and $1. Fix: $2, then run the command again" >&2
  exit 1
}
command -v apt-get >/dev/null 2>&1 ||
  fail "this system has no apt-get" "install Chromium, Slurm (slurmctld, slurmd, sbatch...) and munge with the system's package manager"
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif ! command -v sudo >/dev/null 2>&1; then
  fail "installing them needs root, and sudo is missing" "ask an administrator to run \`apt-get install -y $pkgs\`"
elif [ -t 0 ]; then
  SUDO="sudo"
else
  SUDO="sudo -n"  # no terminal to ask for a password on: fail at once instead of hanging
fi
echo "[need-system-packages] missing: installing Debian's $pkgs (${SUDO:-as root}: apt-get install -y $pkgs)" >&2
# shellcheck disable=SC2086  # $SUDO and $pkgs are word lists
if ! $SUDO apt-get update -qq || ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null; then
  fail "\`${SUDO:+$SUDO }apt-get install -y $pkgs\` failed (output above)" "run \`sudo apt-get install -y $pkgs\` yourself"
fi
left=$(missing)
[ -z "$left" ] ||
  fail "after installing them, the commands of $left are still not found (PATH and $SBIN)" "put their directory on PATH"
