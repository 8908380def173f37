#!/usr/bin/env bash
# Make sure `kubectl` is on PATH: the manifest tests render deploy/k8s with `kubectl kustomize`, as a
# user applies it (tests/integration/deploy, tests/unit/deploy). Idempotent: quiet when present.
# Installs the `kubectl` package with apt when a configured repository has it and we are root
# (Debian itself does not ship it); otherwise says how, and exits 1.
set -euo pipefail

say() { echo "ensure-kubectl: $*" >&2; }

if command -v kubectl >/dev/null; then
  exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null && apt-cache show kubectl >/dev/null 2>&1; then
  say "installing kubectl (for the manifest tests)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kubectl >/dev/null
  command -v kubectl >/dev/null && exit 0
fi
say "no kubectl: install it (https://kubernetes.io/docs/tasks/tools/) or the manifest tests fail under CI and skip elsewhere"
exit 1
