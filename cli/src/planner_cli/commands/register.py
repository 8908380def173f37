"""planner register [settings] [-- COMMAND...]: register a stock engine in planner_engines."""

from __future__ import annotations

import argparse

NAME = "register"
HELP = "register a stock engine (vLLM, SGLang, llama.cpp, TRT-LLM) with its capabilities; drain it on SIGTERM"
DESCRIPTION = (
    "Sidecar: `planner register --engine-url http://127.0.0.1:8000 --component decode` registers the "
    "engine serving there. Wrapper: `planner register --component agg -- python -m "
    "vllm.entrypoints.openai.api_server --port {port} ...` starts the engine on a free port first and "
    "stops it after draining. Capabilities come from the engine itself (vLLM: vllm:cache_config_info "
    "and /v1/models; SGLang: sglang:max_total_num_tokens; llama.cpp: /props); limits it does not "
    "export come from its command line or the settings. Settings: `planner register --help` lists them "
    "(env PLANNER_*; NATS auth as every service)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from planner_runtime.register.settings import RegisterSettings
    from planner_runtime.settings import add_flags

    add_flags(parser, RegisterSettings)
    parser.add_argument(
        "engine_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the engine to start and own (wrapper); omit to register a running engine (sidecar)",
    )


def run(args: argparse.Namespace) -> int:

    from planner_runtime.logs import configure_logging
    from planner_runtime.register.run import main as register
    from planner_runtime.register.settings import RegisterSettings
    from planner_runtime.settings import SettingsError, load_settings

    flags = {k.removeprefix("setting__"): v for k, v in vars(args).items() if k.startswith("setting__")}
    command = list(args.engine_command)
    if command and command[0] != "--":
        print(f"planner register: unexpected argument {command[0]!r} (the engine's command goes after --)")
        return 2
    command = command[1:]
    try:
        settings = load_settings(RegisterSettings, flags=flags, config_file=args.config)
    except SettingsError as exc:
        print(f"planner register: {exc}")
        return 2
    if not command and not settings.engine_url:
        print("planner register: give --engine-url (sidecar) or a command after -- (wrapper)")
        return 2
    configure_logging(settings.log_level, settings.log_json)
    return register(settings, command)
