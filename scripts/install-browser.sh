#!/usr/bin/env bash
# Installs headless Chromium and chromedriver (Debian packages) for the dashboard's browser tests
# (tests/dashboard_browser.rs). Idempotent: does nothing when chromedriver is already there.
set -euo pipefail
if [ -x /usr/bin/chromedriver ] && [ -x /usr/bin/chromium ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
