"""`python -m simulator` (also installed as the console script `connect-simulator`)."""

import sys

try:
    from simulator.cli import main
except ModuleNotFoundError as e:  # run by an interpreter without the project's dependencies
    if (e.name or "").partition(".")[0] == "simulator":
        raise
    print(
        f"python -m simulator: {sys.executable} lacks the project's dependencies (no module named '{e.name}'); "
        "run .venv/bin/python -m simulator, or connect-simulator (installed by `make up` and `make setup`) "
        "from the project's virtualenv",
        file=sys.stderr,
    )
    sys.exit(1)

sys.exit(main())
