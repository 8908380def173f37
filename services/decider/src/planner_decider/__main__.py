"""Entry point: `planner-decider` or `python -m planner_decider`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_decider.service import SERVICE

    return run_service(SERVICE, prog="planner-decider")


if __name__ == "__main__":
    raise SystemExit(main())
