"""Entry point: `python -m planner_fpm_relay`."""

import sys


def main() -> int:
    from planner_cli.main import main as cli_main

    return cli_main(["serve", "fpm_relay", *sys.argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main())
