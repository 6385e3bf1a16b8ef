#!/usr/bin/env bash
# Fleet end to end (examples/fleet.rs): three router instances with different
# traffic, a real Prometheus scraping them with ops/alerts.yml and
# ops/fleet.yml loaded, two scenarios, each with a fresh Prometheus:
#   downstream  pricing slowed on every instance: TailguardConsumerDegradedFleetWide{consumer="pricing"}
#   router      every consumer slowed on instance c: TailguardRouterInstanceDegraded{instance="c"}
# and in both: no fleet alert before the slowdown, the fleet P99 from the
# cumulative histograms in the exact P99's bucket, breaker_open_seconds_total
# against the open time a monitor thread measured. Loopback addresses only;
# each scenario is bounded by `timeout` (which also kills the Prometheus the
# example started), and the work directory is removed however it ends.
# Installs Prometheus with apt-get when it is missing.
#
#   .ci/fleet-e2e.sh [SCENARIO...]     # default: downstream router; CARGO_TARGET_DIR honoured
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
SECONDS=0
target_dir="${CARGO_TARGET_DIR:-target}"
scenarios=("$@")
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(downstream router)

step() { printf '\n==> %s\n' "$*"; }

bash .ci/install-prometheus.sh
prometheus --version 2>&1 | sed -n 1p

step "promtool check rules ops/alerts.yml ops/fleet.yml"
promtool check rules ops/alerts.yml ops/fleet.yml

step "build the example"
cargo build --quiet --features prometheus --example fleet

work="$(mktemp -d)"
pid=""
cleanup() {
  status=$?
  # `timeout` passes the signal on to its process group: the example and its Prometheus.
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT INT TERM

summary=()
for scenario in "${scenarios[@]}"; do
  step "scenario $scenario (a fresh Prometheus)"
  started=$SECONDS
  timeout -k 5 75 "$target_dir/debug/examples/fleet" --scenario "$scenario" \
    --prometheus "$(command -v prometheus)" --rules ops/alerts.yml --rules ops/fleet.yml \
    --work-dir "$work" &
  pid=$!
  status=0
  wait "$pid" || status=$?
  pid=""
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "fleet e2e: scenario $scenario did not finish within 75 s" >&2
    exit 1
  elif [ "$status" != 0 ]; then
    echo "fleet e2e: scenario $scenario failed (exit status $status)" >&2
    exit 1
  fi
  summary+=("$scenario: passed in $((SECONDS - started)) s")
done

step "summary"
printf '  %s\n' "${summary[@]}"
step "fleet e2e passed in ${SECONDS}s"
