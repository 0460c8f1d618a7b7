#!/bin/sh
# The compiler launcher of the CUDA kernel libraries: runs the compile command it is given
# (nvcc ... --resource-usage ... -o OBJ) and keeps ptxas's report of each kernel's registers,
# shared memory, stack and spills in DIR/OBJ-NAME.txt, where the simulator's profiler reads them
# (occupancy on a named GPU); every other line of the compiler's output passes through.
#
#   ptxas-resources.sh DIR COMPILER ARGS...
dir="$1"
shift
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  prev="$a"
done
mkdir -p "$dir"
log="$(mktemp)"
"$@" 2>"$log"
rc=$?
if [ -n "$out" ]; then
  name="$(printf '%s' "$out" | tr '/' '_')"
  grep -e 'ptxas info' -e 'bytes stack frame' "$log" >"$dir/$name.txt" || true
fi
grep -v -e 'ptxas info' -e 'bytes stack frame' "$log" >&2 || true
rm -f "$log"
exit $rc
