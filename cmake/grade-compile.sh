#!/bin/sh
# The compiler launcher of the grader's lab tree (scripts/grade): runs the compile command it is
# given as it is, or, when scripts/grade sets PD_GRADE_SANDBOX (a command prefix: its sandbox,
# with the user, the network namespace and the limits it could apply), through that prefix, so a
# submission's code is compiled with no more rights than it runs with.
#
#   grade-compile.sh COMPILER ARGS...
if [ -n "${PD_GRADE_SANDBOX:-}" ]; then
  # shellcheck disable=SC2086  # a word list, split on purpose
  exec $PD_GRADE_SANDBOX "$@"
fi
exec "$@"
