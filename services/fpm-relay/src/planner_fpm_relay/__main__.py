"""Entry point: `planner-fpm-relay` or `python -m planner_fpm_relay`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_fpm_relay.service import SERVICE

    return run_service(SERVICE, prog="planner-fpm-relay")


if __name__ == "__main__":
    raise SystemExit(main())
