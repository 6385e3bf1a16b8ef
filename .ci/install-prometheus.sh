#!/usr/bin/env bash
# Installs prometheus and promtool with apt-get when either is missing (the
# package's init script kept from starting a daemon on 0.0.0.0:9090). Used by
# .ci/prometheus-e2e.sh and .ci/fleet-e2e.sh.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
printf '\n==> %s\n' "installing prometheus (apt-get)"
export DEBIAN_FRONTEND=noninteractive
own_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  own_policy=1
fi
apt_log="$(mktemp)"
apt_status=0
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; } >"$apt_log" 2>&1 ||
  apt_status=$?
if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
if [ "$apt_status" != 0 ]; then
  cat "$apt_log" >&2
  rm -f "$apt_log"
  exit 1
fi
rm -f "$apt_log"
