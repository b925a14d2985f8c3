#!/usr/bin/env bash
# summarize.sh COMMAND...: runs a go test command, streaming its output,
# and when it fails repeats at the end which cases failed or were still
# running at the timeout, with the last lines the tests logged: a
# timeout's goroutine dump would otherwise bury them.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if ((rc)); then
	echo "== $* failed (exit $rc): the cases that failed or were running, and the last lines they logged"
	grep -E -A4 '^panic: test timed out' "$log"
	grep -E '^ *--- FAIL' "$log"
	grep -E '^ +[A-Za-z0-9_]+_test\.go:[0-9]+: ' "$log" | tail -n 12
fi
exit "$rc"
