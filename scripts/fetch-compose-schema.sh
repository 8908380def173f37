#!/usr/bin/env bash
# The Compose file JSON schema, for validating docker-compose.yml offline: it ships inside the
# docker-compose 1.29.2 wheel on PyPI (compose/config/compose_spec.json). Cached in .cache/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/compose_spec.json
[ -s "$out" ] && exit 0
mkdir -p .cache/wheels
python3 -m pip download -q --no-deps --disable-pip-version-check docker-compose==1.29.2 -d .cache/wheels
python3 - <<'PY'
import zipfile, glob
whl = glob.glob(".cache/wheels/docker_compose-1.29.2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    open(".cache/compose_spec.json", "wb").write(z.read("compose/config/compose_spec.json"))
PY
echo "compose schema cached in $out"
