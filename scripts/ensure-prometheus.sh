#!/usr/bin/env bash
# Make sure a `prometheus` binary is on PATH for the predictor's PromQL integration tests
# (tests/integration/predictor_svc/test_predictor_prometheus.py). Idempotent: quiet when present.
# Installs Debian's package when missing and we are root; otherwise says how, and exits 1.
set -euo pipefail

say() { echo "ensure-prometheus: $*" >&2; }

if command -v prometheus >/dev/null; then
  exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  say "installing Debian's prometheus (for the predictor's PromQL tests)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # The package starts a system service where an init system runs; the tests start their own.
  command -v prometheus >/dev/null && exit 0
fi
say "no prometheus binary: install it (Debian/Ubuntu: sudo apt-get install prometheus) or the PromQL tests fail under CI and skip elsewhere"
exit 1
