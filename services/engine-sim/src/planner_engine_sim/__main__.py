"""Entry point: `planner-engine-sim` or `python -m planner_engine_sim`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_engine_sim.service import SERVICE

    return run_service(SERVICE, prog="planner-engine-sim")


if __name__ == "__main__":
    raise SystemExit(main())
