#!/usr/bin/env bash
# under-load.sh [-n HOGS] COMMAND [ARG...]
#
# Runs COMMAND while HOGS busy loops (default 2) compete with it for the CPU,
# the way a shared 2-core CI machine behaves on a bad day, and exits with
# COMMAND's status. The busy loops are killed when this script exits, however
# it exits (COMMAND ends, Ctrl-C, SIGTERM). `make test-loaded` runs
# `make test` like this; the suite must pass so.
#
# Example: scripts/under-load.sh go test -race -count=6 -run TestCompareCommand ./loadgen/cli/
set -u

hogs=2
if [ "${1:-}" = "-n" ]; then
	case "${2:-}" in
	'' | *[!0-9]*)
		echo "under-load.sh: -n needs a number of busy loops, got '${2:-}'" >&2
		exit 2
		;;
	esac
	hogs=$2
	shift 2
fi
if [ $# -eq 0 ]; then
	echo "usage: under-load.sh [-n HOGS] COMMAND [ARG...]" >&2
	exit 2
fi

pids=()
cmd=
stop_hogs() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null
	done
}
# on_signal SIG STATUS: pass SIG on to COMMAND, wait for it, exit with STATUS.
on_signal() {
	trap '' "$1"
	if [ -n "$cmd" ]; then
		kill -s "$1" "$cmd" 2>/dev/null
		wait "$cmd" 2>/dev/null
	fi
	exit "$2"
}
trap stop_hogs EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM

for _ in $(seq 1 "$hogs"); do
	(while :; do :; done) &
	pids+=($!)
done

# COMMAND runs in the background so that a signal reaches this script at
# once (bash runs traps only between commands). It keeps our stdin and, unlike
# a plain background job, does not ignore SIGINT and SIGQUIT, so Ctrl-C stops it.
(
	trap - INT QUIT
	exec "$@"
) <&0 &
cmd=$!
wait "$cmd"
