"""Entry point: `planner-actuator-k8s` or `python -m planner_actuator_k8s`."""

from planner_runtime.service import run_service


def main() -> int:
    from planner_actuator_k8s.service import SERVICE

    return run_service(SERVICE, prog="planner-actuator-k8s")


if __name__ == "__main__":
    raise SystemExit(main())
