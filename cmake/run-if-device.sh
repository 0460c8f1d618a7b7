#!/bin/sh
# Usage: run-if-device.sh DEVICE_QUERY PROGRAM [ARGS...]
# Runs PROGRAM when DEVICE_QUERY finds a CUDA device; otherwise exits 77, which CTest reports
# as a skipped test (never as a pass).
query="$1"; shift
"$query" --quiet || exit $?
exec "$@"
