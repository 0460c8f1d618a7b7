# Shared by the scripts in this folder (sourced, not run).
# Puts nvcc on the PATH when the toolkit sits in its default place, and names the build folders:
# PD_BUILD (the main build) and PD_BUILD_SANITIZE (the simulator with the sanitizers, made by
# scripts/test).
set -euo pipefail
PD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PD_BUILD="${PD_BUILD:-$PD_ROOT/build}"
PD_BUILD_SANITIZE="${PD_BUILD_SANITIZE:-$PD_ROOT/build-sanitize}"
PD_JOBS="${PD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
if ! command -v nvcc >/dev/null 2>&1; then
  for dir in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    if [ -x "$dir/nvcc" ]; then export PATH="$dir:$PATH"; break; fi
  done
fi

pd_configure() {
  cmake -S "$PD_ROOT" -B "$PD_BUILD" -DCMAKE_BUILD_TYPE="${PD_BUILD_TYPE:-Release}" "$@"
}

pd_build() {
  cmake --build "$PD_BUILD" -j "$PD_JOBS" "$@"
}
