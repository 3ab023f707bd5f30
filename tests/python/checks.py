"""The runner every check script ends with: each check in turn, an `ok` or `FAIL` line per
check (a failure's traceback after it), then the summary line the Rust tests read
(`N passed, M failed`), and a non-zero exit when any failed."""

import sys
import traceback


def run(tests):
    """Runs `tests`, a list of (name, function) pairs, and exits."""
    failed = 0
    for name, f in tests:
        try:
            f()
            print("ok   ", name)
        except Exception:  # noqa: BLE001 - report every failure, then exit non-zero
            failed += 1
            print("FAIL ", name)
            traceback.print_exc(file=sys.stdout)
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
