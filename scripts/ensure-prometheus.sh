#!/usr/bin/env bash
# Makes sure `prometheus` is on PATH for test/observability: installs
# Debian's prometheus package with apt-get when missing and the user is
# root; otherwise prints why and exits 0 (the tests then skip).
exec "$(dirname "$0")/ensure-apt-tool.sh" prometheus prometheus
