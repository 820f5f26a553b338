#!/bin/sh
# Chromium for the browser tests (the HTML report, the MLflow UI, JupyterLab: tests/browser.py).
# No PyPI package ships it, so README's test command runs this first: it does nothing when a
# Chromium is on PATH, else installs Debian's `chromium` package with apt-get: directly as
# root, through sudo otherwise (sudo asks for a password on a terminal; without one it must
# not need it). Anything else stops here with what to do, before the ~13 minutes of tests.
# usage: sh scripts/need-chromium.sh
for exe in chromium chromium-browser google-chrome; do
  command -v "$exe" >/dev/null 2>&1 && exit 0
done
fail() {
  echo "error: Chromium is needed by the browser tests and $1. Fix: $2, then run the command again" >&2
  exit 1
}
command -v apt-get >/dev/null 2>&1 ||
  fail "this system has no apt-get" "install Chromium with the system's package manager so that \`chromium\` is on PATH"
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif ! command -v sudo >/dev/null 2>&1; then
  fail "installing it needs root, and sudo is missing" "ask an administrator to run \`apt-get install -y chromium\`"
elif [ -t 0 ]; then
  SUDO="sudo"
else
  SUDO="sudo -n"  # no terminal to ask for a password on: fail at once instead of hanging
fi
echo "[need-chromium] chromium not found: installing Debian's chromium package (${SUDO:-as root}: apt-get install -y chromium)" >&2
if ! $SUDO apt-get update -qq || ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then
  fail "\`${SUDO:+$SUDO }apt-get install -y chromium\` failed (output above)" "run \`sudo apt-get install -y chromium\` yourself"
fi
command -v chromium >/dev/null 2>&1 ||
  fail "the chromium package installed no \`chromium\` on PATH" "put Chromium's directory on PATH"
