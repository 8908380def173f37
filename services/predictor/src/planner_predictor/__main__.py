"""Entry point: `planner-predictor` or `python -m planner_predictor`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_predictor.service import SERVICE

    return run_service(SERVICE, prog="planner-predictor")


if __name__ == "__main__":
    raise SystemExit(main())
