#!/bin/sh
# The compiler launcher of the grader's lab tree (scripts/grade): runs the compile command it is
# given as it is, or, when scripts/grade sets PD_GRADE_SANDBOX (a command prefix: its sandbox,
# with the user, the network namespace and the limits it could apply), hands it to the grader,
# which runs it through that prefix on staged copies of what it reads (scripts/grade, "The
# stage"): a submission's code is compiled with no more rights than it runs with, and reads
# nothing of the checkout or the build, which its user may not be able to read at all.
#
#   grade-compile.sh COMPILER ARGS...
if [ -n "${PD_GRADE_SANDBOX:-}" ]; then
  exec "${PD_GRADE_PYTHON:-python3}" "$PD_GRADE_SCRIPT" --sandboxed-compile "$@"
fi
exec "$@"
