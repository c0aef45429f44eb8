#!/usr/bin/env bash
# Makes sure `nginx` is on PATH for `make bench-peers`, `make demo` and the
# peer tests (loadgen/peers): installs Debian's nginx package with apt-get
# when missing and the user is root, never starting its system service;
# otherwise prints why and exits 0 (the nginx rows and tests are then skipped
# with a message).
exec "$(dirname "$0")/ensure-apt-tool.sh" nginx nginx
