#!/usr/bin/env bash
# On a GPU node with only PyTorch: install the offline bundle's parts that are here, then
# `lab capture` every mode of a params file (raw /metrics, /server_info, server.log, /generate
# streams per mode; lab/pipeline/capture.py). Writes OUT/capture-<name>.tar.xz.
# usage: scripts/gpu-node/capture.sh PARAMS OUT [DEADLINE_S]
set -u
params=$1; out=$2; deadline=${3:-480}
name=$(basename "$params" .yaml)
t0=$(date +%s)
python3 -m lab.offline.install dist/node-bundle --venv .venv-node || exit 1
source .venv-node/bin/activate
echo "install $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python -c "import torch, transformers, tokenizers, sglang; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'sglang', sglang.__version__)"
python -m lab.offline.importcheck 2>&1 | tail -8
mkdir -p "$out"
python3 -m pip list --format=freeze > "$out/node-packages.txt" 2>/dev/null
PYTHONUNBUFFERED=1 lab capture --params "$params" --out "/tmp/capture/$name" --requests 8 --concurrency 1 --concurrency 4 \
  --deadline-s $(( deadline - ($(date +%s) - t0) )) 2>&1 | grep -v "^\s*$" | tail -40
tar -C /tmp/capture -cJf "$out/capture-$name.tar.xz" "$name"
ls -la "$out"; echo "total $(( $(date +%s) - t0 )) s"
