#!/usr/bin/env bash
# ensure-apt-tool.sh PACKAGE COMMAND [COMMAND...]
#
# Makes sure one of COMMANDs is on PATH, installing Debian's PACKAGE with
# apt-get when none is and the user is root (non-interactively, without
# recommended packages and without starting any service the package ships).
# When the program cannot be had (not root, no apt-get, install failed) it
# prints why on stderr and exits 0: the tests that need it skip with a
# message. Set ENSURE_STRICT=1 to exit 1 instead.
set -uo pipefail

pkg=${1:?usage: ensure-apt-tool.sh PACKAGE COMMAND [COMMAND...]}
shift
cmds=("$@")
[ ${#cmds[@]} -gt 0 ] || cmds=("$pkg")

found() {
	local c
	for c in "${cmds[@]}"; do
		if command -v "$c" >/dev/null 2>&1; then
			echo "$(command -v "$c")"
			return 0
		fi
	done
	return 1
}

unavailable() {
	echo "ensure: $pkg not available: $*; the tests that need ${cmds[0]} will skip" >&2
	[ "${ENSURE_STRICT:-0}" = 1 ] && exit 1
	exit 0
}

if path=$(found); then
	echo "ensure: ${cmds[0]} present: $path"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	unavailable "${cmds[*]} not on PATH and not root (install it with: sudo apt-get install -y $pkg)"
fi
if ! command -v apt-get >/dev/null 2>&1; then
	unavailable "${cmds[*]} not on PATH and no apt-get on this machine"
fi

# Never start the package's service: a policy-rc.d that refuses every
# action, only if the machine has none (docker images usually do).
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
# Wait for another apt/dpkg run (a parallel test, unattended upgrades)
# rather than failing on its lock.
apt_opts=(-o DPkg::Lock::Timeout=300)
apt_install() {
	apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "$pkg" </dev/null
}
echo "ensure: installing $pkg with apt-get"
if ! apt_install; then
	echo "ensure: apt-get install failed; running apt-get update and retrying" >&2
	{ apt-get "${apt_opts[@]}" update -qq </dev/null && apt_install; } || unavailable "apt-get install $pkg failed"
fi
if path=$(found); then
	echo "ensure: ${cmds[0]} installed: $path"
	exit 0
fi
unavailable "$pkg installed but none of ${cmds[*]} is on PATH"
