"""Entry point: `planner-actuator-circus` or `python -m planner_actuator_circus`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_actuator_circus.service import SERVICE

    return run_service(SERVICE, prog="planner-actuator-circus")


if __name__ == "__main__":
    raise SystemExit(main())
