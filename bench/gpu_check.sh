#!/usr/bin/env bash
# The one-call GPU check (docs/gpu.md, "The one-call GPU check"): run from anywhere on a machine
# with a CUDA GPU, CUDA (compute-sanitizer), CuPy, Numba, pandas, pyarrow and pytest; no internet
# needed. Everything goes into one folder (default out/gpu-check-<UTC time>/):
#
#   bench/gpu_check.sh [--out DIR] [--quick] [--steps a,b] [--wheels DIR] [--python PY] [--dry-run]
#
# See `bench/gpu_check.sh --help` and bench/gpu_check.py for the steps.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
py="${PYTHON:-}"
if [[ -z "$py" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then py="$root/.venv/bin/python"; else py="$(command -v python3 || command -v python)"; fi
fi
cd "$root"
exec "$py" "$here/gpu_check.py" "$@"
