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
  apt_status=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; } >"$apt_log" 2>&1 ||
    apt_status=$?
  if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  if [ "$apt_status" != 0 ]; then
    cat "$apt_log" >&2
    exit 1
  fi
  rm -f "$apt_log"
fi
prometheus --version 2>&1 | sed -n 1p

step "promtool check rules ops/alerts.yml"
promtool check rules ops/alerts.yml

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

step "promtool test rules (the alerts fire when they should, and only then)"
# The alerts without their annotations: promtool compares annotations too,
# and these tests are about the expressions, `for` and labels.
awk '/^        annotations:/ { skip = 1; next } skip && /^          / { next } { skip = 0; print }' \
  ops/alerts.yml >"$work/alerts.yml"
cat >"$work/alerts_test.yml" <<'YAML'
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'breaker_flapping{consumer="pricing",instance="a",job="t"}'
        values: '0 1x10'
      - series: 'breaker_flapping{consumer="compliance",instance="a",job="t"}'
        values: '0x10'
      - series: 'breaker_open_duration_seconds{consumer="pricing",instance="a",job="t"}'
        values: '0+60x10'
      - series: 'breaker_state{consumer="pricing",instance="a",job="t"}'
        values: '0 1x20'
      - series: 'breaker_mode{consumer="pricing",instance="a",job="t",mode="normal"}'
        values: '1x20'
      - series: 'breaker_state{consumer="search",instance="a",job="t"}'
        values: '0 1x20'
      - series: 'breaker_mode{consumer="search",instance="a",job="t",mode="normal"}'
        values: '0x20'
      - series: 'breaker_mode{consumer="search",instance="a",job="t",mode="metrics_only"}'
        values: '1x70'
      - series: 'breaker_fallback_depth{consumer="pricing",instance="a",job="t"}'
        values: '900x5'
      - series: 'breaker_fallback_capacity{consumer="pricing",instance="a",job="t"}'
        values: '1000x5'
    alert_rule_test:
      - eval_time: 4m
        alertname: TailguardBreakerFlapping
      - eval_time: 7m
        alertname: TailguardBreakerFlapping
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, instance: a, job: t}
      - eval_time: 5m
        alertname: TailguardBreakerOpenTooLong
      - eval_time: 6m
        alertname: TailguardBreakerOpenTooLong
        exp_alerts:
          - exp_labels: {severity: critical, consumer: pricing, instance: a, job: t}
      - eval_time: 10m
        alertname: TailguardBreakerNotClosing
      - eval_time: 16m
        alertname: TailguardBreakerNotClosing
        exp_alerts:
          - exp_labels: {severity: critical, consumer: pricing, instance: a, job: t}
      - eval_time: 3m
        alertname: TailguardFallbackNearCapacity
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, instance: a, job: t}
      - eval_time: 65m
        alertname: TailguardBreakerOverrideLeftOn
        exp_alerts:
          - exp_labels: {severity: info, consumer: search, instance: a, job: t, mode: metrics_only}
  - interval: 1m
    input_series:
      # 10 calls/s, 10% slow against a 1% limit, never leaves CLOSED.
      - series: 'breaker_calls_total{consumer="pricing",instance="a",job="t"}'
        values: '0+600x20'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="a",job="t"}'
        values: '0+60x20'
      - series: 'breaker_state{consumer="pricing",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="a",job="t"}'
        values: '0.01x20'
      - series: 'breaker_window_seconds{consumer="pricing",instance="a",job="t"}'
        values: '1x20'
      - series: 'breaker_min_calls{consumer="pricing",instance="a",job="t"}'
        values: '5x20'
      # The same traffic, but it trips.
      - series: 'breaker_calls_total{consumer="search",instance="a",job="t"}'
        values: '0+600x20'
      - series: 'breaker_slow_calls_total{consumer="search",instance="a",job="t"}'
        values: '0+60x20'
      - series: 'breaker_state{consumer="search",instance="a",job="t"}'
        values: '0 0 0 1 0 0 0 1 0 0 0 1 0 0 0 1 0 0 0 1'
      - series: 'breaker_slow_ratio_limit{consumer="search",instance="a",job="t"}'
        values: '0.01x20'
      - series: 'breaker_window_seconds{consumer="search",instance="a",job="t"}'
        values: '1x20'
      - series: 'breaker_min_calls{consumer="search",instance="a",job="t"}'
        values: '5x20'
      # 10% slow within its own P80 rule (limit 20%): as configured.
      - series: 'breaker_calls_total{consumer="lenient",instance="a",job="t"}'
        values: '0+600x20'
      - series: 'breaker_slow_calls_total{consumer="lenient",instance="a",job="t"}'
        values: '0+60x20'
      - series: 'breaker_state{consumer="lenient",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_slow_ratio_limit{consumer="lenient",instance="a",job="t"}'
        values: '0.2x20'
      - series: 'breaker_window_seconds{consumer="lenient",instance="a",job="t"}'
        values: '1x20'
      - series: 'breaker_min_calls{consumer="lenient",instance="a",job="t"}'
        values: '5x20'
      # Slow, but 10 calls per window never reach its min_calls of 50.
      - series: 'breaker_calls_total{consumer="sparse",instance="a",job="t"}'
        values: '0+600x20'
      - series: 'breaker_slow_calls_total{consumer="sparse",instance="a",job="t"}'
        values: '0+60x20'
      - series: 'breaker_state{consumer="sparse",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_slow_ratio_limit{consumer="sparse",instance="a",job="t"}'
        values: '0.01x20'
      - series: 'breaker_window_seconds{consumer="sparse",instance="a",job="t"}'
        values: '1x20'
      - series: 'breaker_min_calls{consumer="sparse",instance="a",job="t"}'
        values: '50x20'
      # Items handed back: refused from 5m on (pricing); none (ledger).
      - series: 'breaker_fallback_handed_back_total{consumer="pricing",class="idle",instance="a",job="t"}'
        values: '0x5 3 9 9 9 9 9 9 9 9 9 9 9 9 9 9'
      - series: 'breaker_fallback_displaced_total{consumer="pricing",class="idle",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_fallback_handed_back_total{consumer="ledger",class="idle",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_fallback_displaced_total{consumer="ledger",class="idle",instance="a",job="t"}'
        values: '0x20'
      # Closed, queue stuck at 100; and one draining.
      - series: 'breaker_fallback_depth{consumer="pricing",instance="a",job="t"}'
        values: '100x20'
      - series: 'breaker_fallback_depth{consumer="search",instance="a",job="t"}'
        values: '1000-10x20'
      - series: 'breaker_state{consumer="ledger",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_fallback_depth{consumer="ledger",instance="a",job="t"}'
        values: '1000-10x20'
    alert_rule_test:
      - eval_time: 10m
        alertname: TailguardBreakerShouldHaveTripped
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, instance: a, job: t}
      - eval_time: 15m
        alertname: TailguardFallbackNotDraining
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, instance: a, job: t}
      - eval_time: 4m
        alertname: TailguardFallbackHandingBack
      - eval_time: 8m
        alertname: TailguardFallbackHandingBack
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, instance: a, job: t}
      - eval_time: 19m
        alertname: TailguardFallbackHandingBack
YAML
promtool test rules "$work/alerts_test.yml"

step "build the example"
cargo build --quiet --features prometheus --example metrics_server

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
  if grep -q '"result":\[{' <<<"$result"; then break; fi
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

step "the emit-time histogram is ingested as one (its P99 computes)"
q='histogram_quantile(0.99, sum by (le) (rate(breaker_emit_seconds_bucket{consumer="ledger"}[1m])))'
for _ in $(seq 1 30); do
  result="$(curl -fsS --max-time 2 -G "$api/query" --data-urlencode "query=$q" 2>/dev/null || true)"
  if grep -q '"value":\[[0-9.]*,"[0-9.e+-]*"\]' <<<"$result"; then break; fi
  result=""
  sleep 1
done
if [ -z "$result" ]; then
  echo "no P99 from breaker_emit_seconds_bucket within 30 s:" >&2
  curl -fsS --max-time 2 -G "$api/query" --data-urlencode "query=$q" >&2 || true
  exit 1
fi
echo "$result"

step "the rules are loaded"
rules="$(curl -fsS --max-time 2 "$api/rules")"
for alert in TailguardBreakerFlapping TailguardBreakerOpenTooLong TailguardFallbackNearCapacity; do
  grep -q "\"$alert\"" <<<"$rules" || { echo "rule $alert not loaded" >&2; exit 1; }
done
echo "ok: $(grep -o '"type":"alerting"' <<<"$rules" | wc -l) alerting rules loaded"

step "e2e passed in ${SECONDS}s"
