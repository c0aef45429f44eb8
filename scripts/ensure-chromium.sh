#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is on PATH for the status-page
# test: installs Debian's chromium package with apt-get when missing and the
# user is root; otherwise prints why and exits 0 (the tests then skip).
exec "$(dirname "$0")/ensure-apt-tool.sh" chromium chromium chromium-browser google-chrome google-chrome-stable
