#!/usr/bin/env bash
# Make the local base image for the compose smoke when no registry can be reached (idempotent).
#
#   localhost/planner-base:bookworm   <- Debian bookworm minbase + python3 (3.11), python3-venv,
#                                        python3-pip, ca-certificates; `podman import`ed
#   ~/.cache/planner/base/planner-base-bookworm.tar.gz   <- the root filesystem, kept so a machine
#                                        whose podman storage was wiped re-imports in seconds
#
# It stands in for python:3.11-slim (the Dockerfile's default BASE): same Python minor version,
# nothing else from it is used. Skipped when the image exists; ~2-4 min from nothing (debootstrap).
# Override the mirror with DEBIAN_MIRROR. Progress on stderr; stdout is the image name.
set -euo pipefail

IMAGE="${PLANNER_BASE_IMAGE:-localhost/planner-base:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/planner/base"
TARBALL="$CACHE/planner-base-bookworm.tar.gz"

say() { echo "build-base-image: $*" >&2; }

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi

if [[ ! -s $TARBALL ]]; then
  command -v debootstrap >/dev/null || { say "debootstrap missing (scripts/ensure-podman.sh installs it)"; exit 1; }
  [[ $(id -u) -eq 0 ]] || { say "debootstrap needs root"; exit 1; }
  mkdir -p "$CACHE"
  ROOT="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
  trap 'rm -rf "$ROOT"' EXIT
  say "debootstrap bookworm into $ROOT (a few minutes, once)"
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$ROOT" "$MIRROR" >&2
  # Smaller and reproducible enough: no apt lists, caches or docs in the image.
  chroot "$ROOT" apt-get clean
  rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/usr/share/doc/* \
    "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/* "$ROOT"/var/log/*.log
  "$ROOT/usr/bin/python3" --version >&2 2>/dev/null || chroot "$ROOT" python3 --version >&2
  tar -C "$ROOT" --numeric-owner -czf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
fi

say "importing $TARBALL as $IMAGE"
podman import --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' "$TARBALL" "$IMAGE" >/dev/null
echo "$IMAGE"
