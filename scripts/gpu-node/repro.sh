#!/usr/bin/env bash
# On a GPU node with only PyTorch: install the offline bundle's parts that are here, then run the
# pipeline with PARAMS as params.yaml in a working copy (/tmp/labrun, kept between calls while the
# machine is up), one `dvc repro <stage>` at a time until DEADLINE_S; then pack results/, reports/,
# dvc.lock, params.yaml and mlflow.db into OUT/run-<name>.tar.xz.
# usage: scripts/gpu-node/repro.sh PARAMS OUT DEADLINE_S SOURCE_COMMIT STAGE...   (STAGE! = dvc repro -s STAGE)
set -u
params=$1; out=$2; deadline=$3; src=$4; shift 4
name=$(basename "$params" .yaml)
t0=$(date +%s)
python3 -m lab.offline.install dist/node-bundle --venv .venv-node || exit 1
source .venv-node/bin/activate
work=/tmp/labrun-$name
if [ ! -d "$work" ]; then
  mkdir -p "$work"
  tar --exclude=./.venv-node --exclude=./dist -cf - . | tar -C "$work" -xf -
  cd "$work"
  if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=lab -c user.email=lab@localhost commit -qm "device copy of $src"; fi
  cp "$params" params.yaml
  git -c user.name=lab -c user.email=lab@localhost commit -qam "params: $params (device copy of $src)"
else
  cd "$work"
fi
echo "setup $(( $(date +%s) - t0 )) s; git $(git rev-parse --short HEAD)"
# the stages below are one pipeline invocation (this script), so one MLflow parent run
# (lab/tracking/grouping.py), not one per `dvc repro`
LAB_INVOCATION=${LAB_INVOCATION:-$(python -c "import os, psutil; from lab.tracking.grouping import process_id; print(process_id(psutil.Process(os.getppid())))")}
export LAB_INVOCATION
for stage in "$@"; do
  left=$(( deadline - ($(date +%s) - t0) ))
  if [ "$left" -lt "${STAGE_BUDGET_S:-150}" ]; then echo "== $stage: SKIPPED ($left s left)"; continue; fi
  s=$(date +%s)
  single=(); case $stage in *!) stage=${stage%!}; single=(-s);; esac  # STAGE! = this stage only, no upstream
  PYTHONUNBUFFERED=1 timeout "$left" dvc repro "${single[@]}" "$stage" > "/tmp/repro-$name-$stage.log" 2>&1; rc=$?
  echo "== $stage: exit $rc after $(( $(date +%s) - s )) s"
  grep -E "^\[lab\]|Error|error:|FAILED|speedup|faster|slower" "/tmp/repro-$name-$stage.log" | cut -c1-240 | tail -25
done
mkdir -p "$out"; cp /tmp/repro-$name-*.log "$work/results/" 2>/dev/null
tar -C "$work" -cJf "$out/run-$name.tar.xz" results reports dvc.lock params.yaml mlflow.db 2>/dev/null
ls -la "$out"; echo "total $(( $(date +%s) - t0 )) s"
