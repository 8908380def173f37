"""Entry point: `planner-regression` or `python -m planner_regression`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_regression.service import SERVICE

    return run_service(SERVICE, prog="planner-regression")


if __name__ == "__main__":
    raise SystemExit(main())
