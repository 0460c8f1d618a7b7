#!/bin/sh
# The compiler launcher of the CUDA kernel libraries: runs the compile command it is given
# (nvcc ... --resource-usage ... -o OBJ) and keeps ptxas's report of each kernel's registers,
# shared memory, stack and spills in DIR/OBJ-NAME.txt, where the simulator's profiler reads them
# (occupancy on a named GPU); every other line of the compiler's output passes through.
#
# It also enforces the project's rule that no kernel spills: a function whose report shows
# spill stores or loads (on any architecture the build compiles: sm_75 and sm_90 in the test
# command) fails the compile, naming it, unless cmake/spill-allowlist.txt lists it with the
# reason it may spill.
#
# Where nvdisasm is installed (scripts/install-deps), it also writes the object's SASS table,
# DIR/OBJ-NAME.sass (scripts/sass --table: the memory instructions nvcc emitted for each line of
# each kernel), which the profiler folds its counts into.
#
#   ptxas-resources.sh DIR COMPILER ARGS...
dir="$1"
shift
out=""
src=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  [ "$prev" = "-c" ] && src="$a"
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
if [ $rc -eq 0 ]; then
  allow="$(dirname "$0")/spill-allowlist.txt"
  # each function that spills, as "ARCH NAME STORES LOADS", and not in the allow-list
  spills="$(awk -v allow="$allow" '
    BEGIN {
      while ((getline line < allow) > 0) {
        sub(/^[ \t]+/, "", line)
        if (line == "" || line ~ /^#/) continue
        split(line, f, /[ \t]+#[ \t]*/)
        if (f[2] == "") { print "BAD " line; continue }
        allowed[f[1]] = 1
      }
    }
    /Compiling entry function/ { match($0, /for .sm_[0-9a-z]+/); arch = substr($0, RSTART + 5, RLENGTH - 5) }
    /Function properties for/ { fn = $0; sub(/.*Function properties for /, "", fn); sub(/[: ]+$/, "", fn) }
    /bytes spill stores/ {
      stores = $0; sub(/ bytes spill stores.*/, "", stores); sub(/.*, /, "", stores)
      loads = $0; sub(/ bytes spill loads.*/, "", loads); sub(/.*stores, /, "", loads)
      if ((stores + 0 > 0 || loads + 0 > 0) && !(fn in allowed)) print arch " " fn " " stores " " loads
    }' "$log")"
  if [ -n "$spills" ]; then
    filt="$(command -v c++filt || command -v cu++filt || echo cat)"
    printf '%s\n' "$spills" | while read -r arch fn stores loads; do
      if [ "$arch" = "BAD" ]; then
        echo "error: $allow: '$fn $stores $loads' gives no reason (write: NAME  # why it may spill)" >&2
      else
        echo "error: kernel $(printf '%s' "$fn" | $filt) spills on $arch ($stores bytes of spill stores, $loads of" \
             "spill loads): a library kernel may not spill; lower its registers, or list $fn in $allow with the" \
             "reason" >&2
      fi
    done
    [ -n "$out" ] && rm -f "$out"
    rc=1
  fi
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $rc -eq 0 ] && [ -n "$out" ] && [ -n "$src" ] &&
   [ -x "${PD_NVDISASM:-$root/.tools/nvdisasm/nvidia/cu13/bin/nvdisasm}" ]; then
  if ! python3 "$root/scripts/sass" --object "$out" --table "$dir/$name.sass" "$src" >"$log" 2>&1; then
    echo "warning: no SASS table for $out (the profiler will not fold its counts):" >&2
    cat "$log" >&2
  fi
fi
rm -f "$log"
exit $rc
