"""Entry point: `planner-loadgen` or `python -m planner_loadgen`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_loadgen.service import SERVICE

    return run_service(SERVICE, prog="planner-loadgen")


if __name__ == "__main__":
    raise SystemExit(main())
