#!/usr/bin/env bash
# End to end: a real Prometheus scrapes examples/metrics_server and answers a
# query for breaker_state{consumer="pricing"}; promtool checks and unit-tests
# ops/alerts.yml and ops/fleet.yml, which Prometheus also loads. Loopback
# addresses only. Installs Prometheus with apt-get when it is missing.
#
#   .ci/prometheus-e2e.sh            # PROM_PORT (default 9099), CARGO_TARGET_DIR honoured
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
SECONDS=0
prom_port="${PROM_PORT:-9099}"
target_dir="${CARGO_TARGET_DIR:-target}"

step() { printf '\n==> %s\n' "$*"; }

bash .ci/install-prometheus.sh
prometheus --version 2>&1 | sed -n 1p

step "promtool check rules ops/alerts.yml ops/fleet.yml"
promtool check rules ops/alerts.yml
promtool check rules ops/fleet.yml

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
  # A thread-per-core router: one breaker per core (label `core`). On a, core 0
  # is stuck OPEN in normal mode (alert, with its core); core 1 is stuck OPEN
  # but forced open by an operator while core 2 is normal and CLOSED: no alert
  # for core 1 (joined on the core, not on another core's mode).
  - interval: 1m
    input_series:
      - series: 'breaker_state{consumer="pricing",core="0",instance="a",job="t"}'
        values: '1x20'
      - series: 'breaker_mode{consumer="pricing",core="0",mode="normal",instance="a",job="t"}'
        values: '1x20'
      - series: 'breaker_state{consumer="pricing",core="1",instance="a",job="t"}'
        values: '1x20'
      - series: 'breaker_mode{consumer="pricing",core="1",mode="normal",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_state{consumer="pricing",core="2",instance="a",job="t"}'
        values: '0x20'
      - series: 'breaker_mode{consumer="pricing",core="2",mode="normal",instance="a",job="t"}'
        values: '1x20'
    alert_rule_test:
      - eval_time: 16m
        alertname: TailguardBreakerNotClosing
        exp_alerts:
          - exp_labels: {severity: critical, consumer: pricing, core: "0", instance: a, job: t}
YAML
promtool test rules "$work/alerts_test.yml"

step "promtool test rules (the fleet rules: downstream or router, and only then)"
# The same for ops/fleet.yml: recording rules by their values, alerts by
# their labels.
awk '/^        annotations:/ { skip = 1; next } skip && /^          / { next } { skip = 0; print }' \
  ops/fleet.yml >"$work/fleet.yml"
cat >"$work/fleet_test.yml" <<'YAML'
rule_files: [fleet.yml]
evaluation_interval: 15s
tests:
  # Four instances, four consumers. pricing is OPEN everywhere with no calls
  # (NaN ratios): downstream, and it counts on no instance. ledger and
  # compliance are slow on b only: router b (2 of 4). search is slow on a only:
  # a has 1 of 4 (pricing not counted): neither.
  # compliance on c and d: CLOSED, no calls at all: healthy.
  - interval: 15s
    input_series:
      - series: 'breaker_state{consumer="pricing",instance="a",job="t"}'
        values: '1x40'
      - series: 'breaker_state{consumer="pricing",instance="b",job="t"}'
        values: '1x40'
      - series: 'breaker_state{consumer="pricing",instance="c",job="t"}'
        values: '1x40'
      - series: 'breaker_state{consumer="pricing",instance="d",job="t"}'
        values: '1x40'
      - series: 'breaker_calls_total{consumer="pricing",instance="a",job="t"}'
        values: '500x40'
      - series: 'breaker_calls_total{consumer="pricing",instance="b",job="t"}'
        values: '500x40'
      - series: 'breaker_calls_total{consumer="pricing",instance="c",job="t"}'
        values: '500x40'
      - series: 'breaker_calls_total{consumer="pricing",instance="d",job="t"}'
        values: '500x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="a",job="t"}'
        values: '20x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="b",job="t"}'
        values: '20x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="c",job="t"}'
        values: '20x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="d",job="t"}'
        values: '20x40'
      - series: 'breaker_state{consumer="search",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="search",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="search",instance="c",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="search",instance="d",job="t"}'
        values: '0x40'
      - series: 'breaker_calls_total{consumer="search",instance="a",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="search",instance="b",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="search",instance="c",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="search",instance="d",job="t"}'
        values: '0+150x40'
      - series: 'breaker_slow_calls_total{consumer="search",instance="a",job="t"}'
        values: '0+15x40'
      - series: 'breaker_slow_calls_total{consumer="search",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="search",instance="c",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="search",instance="d",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",instance="c",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",instance="d",job="t"}'
        values: '0x40'
      - series: 'breaker_calls_total{consumer="ledger",instance="a",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",instance="b",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",instance="c",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",instance="d",job="t"}'
        values: '0+150x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",instance="b",job="t"}'
        values: '0+15x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",instance="c",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",instance="d",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="compliance",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="compliance",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="compliance",instance="c",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="compliance",instance="d",job="t"}'
        values: '0x40'
      - series: 'breaker_calls_total{consumer="compliance",instance="a",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="compliance",instance="b",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="compliance",instance="c",job="t"}'
        values: '0x40'
      - series: 'breaker_calls_total{consumer="compliance",instance="d",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="compliance",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="compliance",instance="b",job="t"}'
        values: '0+15x40'
      - series: 'breaker_slow_calls_total{consumer="compliance",instance="c",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="compliance",instance="d",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="a",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="b",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="c",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="d",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="search",instance="a",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="search",instance="b",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="search",instance="c",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="search",instance="d",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",instance="a",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",instance="b",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",instance="c",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",instance="d",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="compliance",instance="a",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="compliance",instance="b",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="compliance",instance="c",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="compliance",instance="d",job="t"}'
        values: '0.01x40'
    promql_expr_test:
      - expr: tailguard:consumer_unhealthy
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="a",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="b",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="c",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="d",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="search",instance="a",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="search",instance="b",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="search",instance="c",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="search",instance="d",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="a",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="b",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="c",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="d",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="compliance",instance="a",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="compliance",instance="b",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="compliance",instance="c",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="compliance",instance="d",job="t"}', value: 0}
      # The first sample: no rate yet, the state part alone.
      - expr: tailguard:consumer_unhealthy{consumer="pricing"}
        eval_time: 0m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="a",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="b",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="c",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="d",job="t"}', value: 1}
      - expr: tailguard:consumer_unhealthy_instances:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="pricing",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="search",job="t"}', value: 0.25}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="ledger",job="t"}', value: 0.25}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="compliance",job="t"}', value: 0.25}
      # pricing, down fleet-wide, counts on no instance: a has search only (1 of 4).
      - expr: tailguard:instance_unhealthy_consumers:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="a",job="t"}', value: 0.25}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="b",job="t"}', value: 0.5}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="c",job="t"}', value: 0}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="d",job="t"}', value: 0}
      - expr: tailguard:breaker_open_instances:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:breaker_open_instances:ratio{consumer="pricing",job="t"}', value: 1}
          - {labels: 'tailguard:breaker_open_instances:ratio{consumer="search",job="t"}', value: 0}
          - {labels: 'tailguard:breaker_open_instances:ratio{consumer="ledger",job="t"}', value: 0}
          - {labels: 'tailguard:breaker_open_instances:ratio{consumer="compliance",job="t"}', value: 0}
    alert_rule_test:
      - eval_time: 1m30s
        alertname: TailguardConsumerDegradedFleetWide
      - eval_time: 5m
        alertname: TailguardConsumerDegradedFleetWide
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, job: t}
      - eval_time: 1m30s
        alertname: TailguardRouterInstanceDegraded
      - eval_time: 5m
        alertname: TailguardRouterInstanceDegraded
        exp_alerts:
          - exp_labels: {severity: warning, instance: b, job: t}
      - eval_time: 5m
        alertname: TailguardFleetFlapping
      - eval_time: 5m
        alertname: TailguardFleetP99AboveThreshold

  # Two instances. pricing is slow on a only (half the fleet: not more than
  # half): no fleet-wide alert, and a has 1 unhealthy consumer of 4: no router
  # alert. search on b was OPEN at one scrape (1m) and closed again: unhealthy
  # for the minute after. ledger on b is slow below its limit (0.5% of 1%),
  # compliance on a within its lenient limit (10% of 20%), on b exactly at it
  # (25% of 25%, not more): all healthy.
  - interval: 15s
    input_series:
      - series: 'breaker_state{consumer="pricing",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="pricing",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="search",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="search",instance="b",job="t"}'
        values: '0 0 0 0 1 0x36'
      - series: 'breaker_state{consumer="ledger",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="compliance",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_state{consumer="compliance",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_calls_total{consumer="pricing",instance="a",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="pricing",instance="b",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="search",instance="a",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="search",instance="b",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",instance="a",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",instance="b",job="t"}'
        values: '0+200x40'
      - series: 'breaker_calls_total{consumer="compliance",instance="a",job="t"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="compliance",instance="b",job="t"}'
        values: '0+128x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="a",job="t"}'
        values: '0+15x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="search",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="search",instance="b",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",instance="a",job="t"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",instance="b",job="t"}'
        values: '0+1x40'
      - series: 'breaker_slow_calls_total{consumer="compliance",instance="a",job="t"}'
        values: '0+15x40'
      - series: 'breaker_slow_calls_total{consumer="compliance",instance="b",job="t"}'
        values: '0+32x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="a",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="b",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="search",instance="a",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="search",instance="b",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",instance="a",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",instance="b",job="t"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="compliance",instance="a",job="t"}'
        values: '0.2x40'
      - series: 'breaker_slow_ratio_limit{consumer="compliance",instance="b",job="t"}'
        values: '0.25x40'
    promql_expr_test:
      - expr: tailguard:consumer_unhealthy
        eval_time: 1m30s
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="a",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="b",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="search",instance="a",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="search",instance="b",job="t"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="a",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="b",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="compliance",instance="a",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="compliance",instance="b",job="t"}', value: 0}
      - expr: tailguard:consumer_unhealthy{instance="b"}
        eval_time: 2m30s
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="b",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="search",instance="b",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="b",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="compliance",instance="b",job="t"}', value: 0}
      - expr: tailguard:consumer_unhealthy_instances:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="pricing",job="t"}', value: 0.5}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="search",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="ledger",job="t"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="compliance",job="t"}', value: 0}
      - expr: tailguard:instance_unhealthy_consumers:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="a",job="t"}', value: 0.25}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="b",job="t"}', value: 0}
    alert_rule_test:
      - eval_time: 5m
        alertname: TailguardConsumerDegradedFleetWide
      - eval_time: 5m
        alertname: TailguardRouterInstanceDegraded

  # Latency histograms, thresholds, flapping, time spent OPEN. pricing: 20% of
  # its calls between 50 ms and 100 ms on both instances (fleet P99 97.5 ms,
  # 0.09750000000000002 in floating point, above its 50 ms threshold); search:
  # every call under 1 ms.
  - interval: 15s
    input_series:
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="a",job="t",le="0.001"}'
        values: '0+50x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="a",job="t",le="0.05"}'
        values: '0+80x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="a",job="t",le="0.1"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="a",job="t",le="+Inf"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="b",job="t",le="0.001"}'
        values: '0+50x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="b",job="t",le="0.05"}'
        values: '0+80x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="b",job="t",le="0.1"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="pricing",instance="b",job="t",le="+Inf"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="a",job="t",le="0.001"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="a",job="t",le="0.05"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="a",job="t",le="0.1"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="a",job="t",le="+Inf"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="b",job="t",le="0.001"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="b",job="t",le="0.05"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="b",job="t",le="0.1"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="search",instance="b",job="t",le="+Inf"}'
        values: '0+100x50'
      # ledger: the same latencies as pricing, but a 100 ms threshold on a (the
      # highest): its P99 is under it, no alert.
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="a",job="t",le="0.001"}'
        values: '0+50x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="a",job="t",le="0.05"}'
        values: '0+80x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="a",job="t",le="0.1"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="a",job="t",le="+Inf"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="b",job="t",le="0.001"}'
        values: '0+50x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="b",job="t",le="0.05"}'
        values: '0+80x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="b",job="t",le="0.1"}'
        values: '0+100x50'
      - series: 'breaker_call_duration_seconds_bucket{consumer="ledger",instance="b",job="t",le="+Inf"}'
        values: '0+100x50'
      # The relative rule lowered pricing's threshold on b: the highest one counts.
      - series: 'breaker_latency_threshold_seconds{consumer="pricing",instance="a",job="t"}'
        values: '0.05x50'
      - series: 'breaker_latency_threshold_seconds{consumer="pricing",instance="b",job="t"}'
        values: '0.04x50'
      - series: 'breaker_latency_threshold_seconds{consumer="ledger",instance="a",job="t"}'
        values: '0.1x50'
      - series: 'breaker_latency_threshold_seconds{consumer="ledger",instance="b",job="t"}'
        values: '0.05x50'
      - series: 'breaker_latency_threshold_seconds{consumer="search",instance="a",job="t"}'
        values: '0.05x50'
      - series: 'breaker_latency_threshold_seconds{consumer="search",instance="b",job="t"}'
        values: '0.05x50'
      # Flapping: pricing on 2 of 3 instances (fires), search on 2 of 5 (under
      # half), ledger on 1 of its 2 (half, but one instance: that is
      # TailguardBreakerFlapping's).
      - series: 'breaker_flapping{consumer="pricing",instance="a",job="t"}'
        values: '1x50'
      - series: 'breaker_flapping{consumer="pricing",instance="b",job="t"}'
        values: '1x50'
      - series: 'breaker_flapping{consumer="pricing",instance="c",job="t"}'
        values: '0x50'
      - series: 'breaker_flapping{consumer="search",instance="a",job="t"}'
        values: '1x50'
      - series: 'breaker_flapping{consumer="search",instance="b",job="t"}'
        values: '1x50'
      - series: 'breaker_flapping{consumer="search",instance="c",job="t"}'
        values: '0x50'
      - series: 'breaker_flapping{consumer="search",instance="d",job="t"}'
        values: '0x50'
      - series: 'breaker_flapping{consumer="search",instance="e",job="t"}'
        values: '0x50'
      - series: 'breaker_flapping{consumer="ledger",instance="a",job="t"}'
        values: '1x50'
      - series: 'breaker_flapping{consumer="ledger",instance="b",job="t"}'
        values: '0x50'
      # pricing OPEN on a, HALF_OPEN on b, CLOSED on c.
      - series: 'breaker_state{consumer="pricing",instance="a",job="t"}'
        values: '1x50'
      - series: 'breaker_state{consumer="pricing",instance="b",job="t"}'
        values: '2x50'
      - series: 'breaker_state{consumer="pricing",instance="c",job="t"}'
        values: '0x50'
      # pricing OPEN all along on a, for 5 minutes on b; search never.
      - series: 'breaker_open_seconds_total{consumer="pricing",instance="a",job="t"}'
        values: '0+15x50'
      - series: 'breaker_open_seconds_total{consumer="pricing",instance="b",job="t"}'
        values: '0+15x20 300x30'
      - series: 'breaker_open_seconds_total{consumer="search",instance="a",job="t"}'
        values: '0x50'
    promql_expr_test:
      - expr: tailguard:call_duration_seconds:fleet_p99_rate1m
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:call_duration_seconds:fleet_p99_rate1m{consumer="pricing",job="t"}', value: 0.09750000000000002}
          - {labels: 'tailguard:call_duration_seconds:fleet_p99_rate1m{consumer="search",job="t"}', value: 0.00099}
          - {labels: 'tailguard:call_duration_seconds:fleet_p99_rate1m{consumer="ledger",job="t"}', value: 0.09750000000000002}
      - expr: tailguard:call_duration_seconds:fleet_p99_rate5m
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:call_duration_seconds:fleet_p99_rate5m{consumer="pricing",job="t"}', value: 0.09750000000000002}
          - {labels: 'tailguard:call_duration_seconds:fleet_p99_rate5m{consumer="search",job="t"}', value: 0.00099}
          - {labels: 'tailguard:call_duration_seconds:fleet_p99_rate5m{consumer="ledger",job="t"}', value: 0.09750000000000002}
      - expr: tailguard:breaker_open_instances:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:breaker_open_instances:ratio{consumer="pricing",job="t"}', value: 0.6666666666666666}
      - expr: tailguard:breaker_flapping_instances:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:breaker_flapping_instances:ratio{consumer="pricing",job="t"}', value: 0.6666666666666666}
          - {labels: 'tailguard:breaker_flapping_instances:ratio{consumer="search",job="t"}', value: 0.4}
          - {labels: 'tailguard:breaker_flapping_instances:ratio{consumer="ledger",job="t"}', value: 0.5}
      - expr: tailguard:breaker_open_seconds:increase1h
        eval_time: 10m
        exp_samples:
          - {labels: 'tailguard:breaker_open_seconds:increase1h{consumer="pricing",job="t"}', value: 900}
          - {labels: 'tailguard:breaker_open_seconds:increase1h{consumer="search",job="t"}', value: 0}
    alert_rule_test:
      - eval_time: 9m
        alertname: TailguardFleetP99AboveThreshold
      - eval_time: 11m
        alertname: TailguardFleetP99AboveThreshold
        exp_alerts:
          - exp_labels: {severity: info, consumer: pricing, job: t}
      - eval_time: 4m45s
        alertname: TailguardFleetFlapping
      - eval_time: 6m
        alertname: TailguardFleetFlapping
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, job: t}
      # Not CLOSED (OPEN or HALF_OPEN) on 2 of 3 instances: fleet-wide.
      - eval_time: 6m
        alertname: TailguardConsumerDegradedFleetWide
        exp_alerts:
          - exp_labels: {severity: warning, consumer: pricing, job: t}

  # Too few to judge. job solo: one instance, pricing OPEN on it (and slow:
  # still 1) is the whole fleet, but one instance: no fleet-wide alert. job
  # small: audit, the only consumer on x and y, OPEN on x only: x has 1 of 1
  # unhealthy, but one consumer is no router problem. job half: ads OPEN on 2
  # of 4 instances, not more than half: no fleet-wide alert.
  - interval: 15s
    input_series:
      - series: 'breaker_state{consumer="pricing",instance="s",job="solo"}'
        values: '1x40'
      - series: 'breaker_calls_total{consumer="pricing",instance="s",job="solo"}'
        values: '0+150x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",instance="s",job="solo"}'
        values: '0+15x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",instance="s",job="solo"}'
        values: '0.01x40'
      - series: 'breaker_state{consumer="ads",instance="h1",job="half"}'
        values: '1x40'
      - series: 'breaker_state{consumer="ads",instance="h2",job="half"}'
        values: '1x40'
      - series: 'breaker_state{consumer="ads",instance="h3",job="half"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ads",instance="h4",job="half"}'
        values: '0x40'
      - series: 'breaker_state{consumer="audit",instance="x",job="small"}'
        values: '1x40'
      - series: 'breaker_state{consumer="audit",instance="y",job="small"}'
        values: '0x40'
    promql_expr_test:
      - expr: tailguard:consumer_unhealthy{job="solo"}
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="s",job="solo"}', value: 1}
      - expr: tailguard:consumer_unhealthy_instances:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="pricing",job="solo"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="audit",job="small"}', value: 0.5}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="ads",job="half"}', value: 0.5}
      - expr: tailguard:instance_unhealthy_consumers:ratio
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="h1",job="half"}', value: 1}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="h2",job="half"}', value: 1}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="h3",job="half"}', value: 0}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="h4",job="half"}', value: 0}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="s",job="solo"}', value: 0}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="x",job="small"}', value: 1}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="y",job="small"}', value: 0}
    alert_rule_test:
      - eval_time: 5m
        alertname: TailguardConsumerDegradedFleetWide
      - eval_time: 5m
        alertname: TailguardRouterInstanceDegraded
  # A thread-per-core router: two instances, two cores each, a breaker per
  # consumer per core (label `core`). pricing is slow on core 1 of a only;
  # ledger is healthy everywhere but flaps on both cores of b: one instance of
  # two, so no fleet flapping alert (it needs 2 instances). Each breaker is
  # judged against its own limit (joined on the core: no many-to-many match);
  # the rules fold the cores into one series per consumer and instance.
  - interval: 15s
    input_series:
      - series: 'breaker_state{consumer="pricing",core="0",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_state{consumer="pricing",core="1",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_state{consumer="pricing",core="0",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_state{consumer="pricing",core="1",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",core="0",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",core="1",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",core="0",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_state{consumer="ledger",core="1",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_calls_total{consumer="pricing",core="0",instance="a",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="pricing",core="1",instance="a",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="pricing",core="0",instance="b",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="pricing",core="1",instance="b",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",core="0",instance="a",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",core="1",instance="a",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",core="0",instance="b",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_calls_total{consumer="ledger",core="1",instance="b",job="tpc"}'
        values: '0+150x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",core="0",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",core="1",instance="a",job="tpc"}'
        values: '0+15x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",core="0",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="pricing",core="1",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",core="0",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",core="1",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",core="0",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_slow_calls_total{consumer="ledger",core="1",instance="b",job="tpc"}'
        values: '0x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",core="0",instance="a",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",core="1",instance="a",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",core="0",instance="b",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="pricing",core="1",instance="b",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",core="0",instance="a",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",core="1",instance="a",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",core="0",instance="b",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_slow_ratio_limit{consumer="ledger",core="1",instance="b",job="tpc"}'
        values: '0.01x40'
      - series: 'breaker_flapping{consumer="ledger",core="0",instance="b",job="tpc"}'
        values: '1x40'
      - series: 'breaker_flapping{consumer="ledger",core="1",instance="b",job="tpc"}'
        values: '1x40'
      - series: 'breaker_flapping{consumer="ledger",core="0",instance="a",job="tpc"}'
        values: '0x40'
      - series: 'breaker_flapping{consumer="ledger",core="1",instance="a",job="tpc"}'
        values: '0x40'
    promql_expr_test:
      - expr: tailguard:consumer_unhealthy{job="tpc"}
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="a",job="tpc"}', value: 1}
          - {labels: 'tailguard:consumer_unhealthy{consumer="pricing",instance="b",job="tpc"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="a",job="tpc"}', value: 0}
          - {labels: 'tailguard:consumer_unhealthy{consumer="ledger",instance="b",job="tpc"}', value: 0}
      - expr: tailguard:consumer_unhealthy_instances:ratio{job="tpc"}
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="pricing",job="tpc"}', value: 0.5}
          - {labels: 'tailguard:consumer_unhealthy_instances:ratio{consumer="ledger",job="tpc"}', value: 0}
      - expr: tailguard:instance_unhealthy_consumers:ratio{job="tpc"}
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="a",job="tpc"}', value: 0.5}
          - {labels: 'tailguard:instance_unhealthy_consumers:ratio{instance="b",job="tpc"}', value: 0}
      - expr: tailguard:breaker_open_instances:ratio{job="tpc"}
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:breaker_open_instances:ratio{consumer="pricing",job="tpc"}', value: 0}
          - {labels: 'tailguard:breaker_open_instances:ratio{consumer="ledger",job="tpc"}', value: 0}
      # One instance of two (not two breakers of one instance) flaps.
      - expr: tailguard:breaker_flapping_instances:ratio{job="tpc"}
        eval_time: 5m
        exp_samples:
          - {labels: 'tailguard:breaker_flapping_instances:ratio{consumer="ledger",job="tpc"}', value: 0.5}
    alert_rule_test:
      - eval_time: 10m
        alertname: TailguardFleetFlapping
YAML
promtool test rules "$work/fleet_test.yml"

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
  - $PWD/ops/fleet.yml
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

step "the fleet rules are loaded and evaluate without errors (up to 30 s)"
# Every rule of group tailguard-fleet is there, each evaluated at least once
# with health "ok" (a join that matches many-to-many at run time reads "err").
fleet_rules='tailguard:consumer_unhealthy tailguard:consumer_unhealthy_instances:ratio
  tailguard:instance_unhealthy_consumers:ratio tailguard:call_duration_seconds:fleet_p99_rate1m
  tailguard:call_duration_seconds:fleet_p99_rate5m tailguard:breaker_open_instances:ratio
  tailguard:breaker_flapping_instances:ratio tailguard:breaker_open_seconds:increase1h
  TailguardConsumerDegradedFleetWide TailguardRouterInstanceDegraded
  TailguardFleetP99AboveThreshold TailguardFleetFlapping'
fleet_status=""
for _ in $(seq 1 30); do
  rules="$(curl -fsS --max-time 2 "$api/rules" 2>/dev/null || true)"
  fleet_status="$(FLEET_RULES="$fleet_rules" python3 -c '
import json, os, sys
want = os.environ["FLEET_RULES"].split()
try:
    groups = json.load(sys.stdin)["data"]["groups"]
except (ValueError, KeyError):
    print("no rules yet"); sys.exit(1)
got = {r["name"]: r for g in groups if g["name"] == "tailguard-fleet" for r in g["rules"]}
bad = [n + ": not loaded" for n in want if n not in got]
bad += [n + ": " + r["health"] + " " + r.get("lastError", "") for n, r in got.items() if r["health"] != "ok"]
bad += [n + ": not in the list above" for n in got if n not in want]
print("\n".join(bad) if bad else "ok: %d fleet rules loaded, all healthy" % len(got))
sys.exit(1 if bad else 0)
' <<<"$rules")" && break
  sleep 1
done
echo "$fleet_status"
grep -q '^ok: ' <<<"$fleet_status" || { echo "fleet rules not loaded or not healthy" >&2; exit 1; }

step "tailguard:consumer_unhealthy has one series per breaker, 0 or 1 (up to 30 s)"
# 1 when as many series read 0 or 1 as there are breakers.
q='count(tailguard:consumer_unhealthy == 0 or tailguard:consumer_unhealthy == 1) == bool count(breaker_state)'
for _ in $(seq 1 30); do
  result="$(curl -fsS --max-time 2 -G "$api/query" --data-urlencode "query=$q" 2>/dev/null || true)"
  if grep -q '"value":\[[0-9.]*,"1"\]' <<<"$result"; then break; fi
  result=""
  sleep 1
done
if [ -z "$result" ]; then
  echo "not one 0/1 series per breaker ($q) within 30 s:" >&2
  curl -fsS --max-time 2 -G "$api/query" --data-urlencode "query=$q" >&2 || true
  exit 1
fi
echo "$result"

step "e2e passed in ${SECONDS}s"
