#!/usr/bin/env bash
# On a machine with a real NVIDIA GPU: runs the exporter against the real NVML and compares
# its values with nvidia-smi, nvidia-smi nvlink and GPM read directly while a known matrix
# multiply runs; says what it could not check. Details: scripts/check_real_gpu.py.
#   bash scripts/check-real-gpu.sh [--window 2] [--load-gpus 0,1] [--exporter PATH]
# Exit status: 0 nothing failed, 1 something did, 2 no NVIDIA GPU here.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$repo/.venv/bin/python}
[ -x "$py" ] || make -C "$repo" venv >&2
cd "$repo"
exec "$py" scripts/check_real_gpu.py "$@"
