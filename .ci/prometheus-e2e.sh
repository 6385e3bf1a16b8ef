#!/usr/bin/env bash
# End to end: a real Prometheus scrapes examples/metrics_server and answers a
# query for breaker_state{consumer="pricing"}; promtool checks ops/alerts.yml,
# which Prometheus also loads. Loopback addresses only. Installs Prometheus
# with apt-get when it is missing.
#
#   .ci/prometheus-e2e.sh            # PROM_PORT (default 9099), CARGO_TARGET_DIR honoured
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
SECONDS=0
prom_port="${PROM_PORT:-9099}"
target_dir="${CARGO_TARGET_DIR:-target}"

step() { printf '\n==> %s\n' "$*"; }

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  step "installing prometheus (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  # Keep the package's init script from starting a daemon on 0.0.0.0:9090.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt_log="$(mktemp)"
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; } >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    exit 1
  fi
  rm -f "$apt_log"
  if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
prometheus --version 2>&1 | head -n 1

step "promtool check rules ops/alerts.yml"
promtool check rules ops/alerts.yml

step "build the example"
cargo build --quiet --features prometheus --example metrics_server

work="$(mktemp -d)"
server_pid=""
prom_pid=""
cleanup() {
  status=$?
  for pid in $prom_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT INT TERM

step "start metrics_server on a free loopback port"
# Port 0: the server binds a free port and prints it. --for: it exits by
# itself even if this script is killed hard.
"$target_dir/debug/examples/metrics_server" 0 --for 180 >"$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port="$(sed -n 's#^listening on http://127\.0\.0\.1:\([0-9]*\)/metrics$#\1#p' "$work/server.log")"
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "metrics_server did not start:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
echo "metrics_server (pid $server_pid) on 127.0.0.1:$port"
curl -fsS --max-time 5 -D - -o /dev/null "http://127.0.0.1:$port/metrics" | grep -i '^content-type'

step "start prometheus on 127.0.0.1:$prom_port"
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/ops/alerts.yml
scrape_configs:
  - job_name: tailguard
    static_configs:
      - targets: ['127.0.0.1:$port']
YAML
mkdir "$work/tsdb"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!

step "query breaker_state{consumer=\"pricing\"} (up to 60 s)"
api="http://127.0.0.1:$prom_port/api/v1"
result=""
for _ in $(seq 1 60); do
  if ! kill -0 "$prom_pid" 2>/dev/null; then
    echo "prometheus exited:" >&2
    tail -n 20 "$work/prometheus.log" >&2
    exit 1
  fi
  result="$(curl -fsS --max-time 2 -G "$api/query" \
    --data-urlencode 'query=breaker_state{consumer="pricing"}' 2>/dev/null || true)"
  if printf '%s' "$result" | grep -q '"result":\[{'; then break; fi
  result=""
  sleep 1
done
if [ -z "$result" ]; then
  echo "no sample for breaker_state{consumer=\"pricing\"} within 60 s" >&2
  curl -fsS --max-time 2 "$api/targets" >&2 || true
  tail -n 20 "$work/prometheus.log" >&2
  exit 1
fi
echo "$result"

step "the rules are loaded"
rules="$(curl -fsS --max-time 2 "$api/rules")"
for alert in TailguardBreakerFlapping TailguardBreakerOpenTooLong TailguardFallbackNearCapacity; do
  printf '%s' "$rules" | grep -q "\"$alert\"" || { echo "rule $alert not loaded" >&2; exit 1; }
done
echo "ok: $(printf '%s' "$rules" | grep -o '"type":"alerting"' | wc -l) alerting rules loaded"

step "e2e passed in ${SECONDS}s"
