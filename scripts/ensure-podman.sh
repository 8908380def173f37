#!/usr/bin/env bash
# Make podman usable for the compose smoke on this machine (idempotent; quiet when all is in place).
#
#   - Debian packages: podman runc netavark aardvark-dns fuse-overlayfs slirp4netns uidmap iptables
#     debootstrap (installed when missing and we are root; else one clear line and exit 1);
#   - /etc/containers/containers.conf: runtime "runc" (crun fails on hosts with cgroups in hybrid
#     mode) and explicit nofile/nproc ulimits (the default rlimits fail with "setrlimit ...
#     Operation not permitted" in CI sandboxes). An existing file that already sets a runtime is
#     left alone;
#   - podman-compose in a cached tool venv (~/.cache/planner/podman-compose), printed on stdout so
#     callers can `PODMAN_COMPOSE=$(scripts/ensure-podman.sh)`.
# Progress goes to stderr. Exit 0 = podman can run a container; non-zero = it cannot (reason on stderr).
set -euo pipefail

PACKAGES=(podman runc netavark aardvark-dns fuse-overlayfs slirp4netns uidmap iptables debootstrap)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/planner"
COMPOSE_VENV="$CACHE/podman-compose"
COMPOSE_VERSION="${PODMAN_COMPOSE_VERSION:-1.2.0}"
CONF=/etc/containers/containers.conf

say() { echo "ensure-podman: $*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]} (Debian)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "podman is not installed: as root, apt-get install ${PACKAGES[*]}"
    exit 1
  fi
fi

if [[ ! -f $CONF ]] || ! grep -qE '^[[:space:]]*runtime[[:space:]]*=' "$CONF"; then
  if [[ -w /etc/containers || -w $CONF ]]; then
    say "writing $CONF (runtime runc, explicit ulimits)"
    {
      [[ -f $CONF ]] && cat "$CONF"
      echo '# added by planner scripts/ensure-podman.sh'
      echo '[containers]'
      echo 'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]'
      echo '[engine]'
      echo 'runtime = "runc"'
    } >"$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
  else
    say "note: $CONF not writable; using podman's defaults"
  fi
fi

if [[ ! -x $COMPOSE_VENV/bin/podman-compose ]]; then
  say "installing podman-compose==$COMPOSE_VERSION into $COMPOSE_VENV"
  rm -rf "$COMPOSE_VENV"
  uv venv -q --python python3 "$COMPOSE_VENV" >&2
  uv pip install -q --python "$COMPOSE_VENV/bin/python" "podman-compose==$COMPOSE_VERSION" >&2
fi

if ! podman info >/dev/null 2>&1; then
  say "podman is installed but cannot run here: $(podman info 2>&1 | grep -v 'level=warn' | tail -1)"
  exit 1
fi
echo "$COMPOSE_VENV/bin/podman-compose"
