"""Benchmark: wall time of `infoprompt --help`, `infoprompt train --help` and a usage error, each a fresh process.

Goal (issue 44): each under a second on an idle core. Prints the median and the slowest of --repeats runs per
command, and how many modules the process loaded (tests/test_cli_startup.py checks that torch & co. are not among
them; the time is checked here, not in the tests, where a busy machine would make it flaky). Pin it to one core to
compare machines: `taskset -c 1 python benchmarks/cli_startup.py`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "infoprompt --help": ["--help"],
    "infoprompt train --help": ["train", "--help"],
    "infoprompt train --meth x (usage error)": ["train", "--out", "run", "--meth", "x"],
    "infoprompt train --method setfit-lora-al (did you mean)": ["train", "--out", "run", "--method", "setfit-lora-al"],
}
# Counts the modules loaded after the CLI has answered (the count is printed by the child at exit).
COUNT = "import atexit, sys; atexit.register(lambda: print(len(sys.modules), file=sys.stderr))"


def run_once(args: list[str]) -> tuple[float, int, int]:
    """Wall seconds, exit status and modules loaded of one `python -m infoprompt.cli ARGS` in a fresh process."""
    code = f"{COUNT}\nimport sys\nfrom infoprompt.cli import main\nsys.exit(main(sys.argv[1:]))"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    return seconds, done.returncode, int(done.stderr.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--repeats", type=int, default=5, help="runs per command (default 5)")
    args = parser.parse_args()
    print(f"{'command':58s} {'median s':>9s} {'max s':>7s} {'exit':>5s} {'modules':>8s}")
    for name, argv in COMMANDS.items():
        runs = [run_once(argv) for _ in range(args.repeats)]
        times = [seconds for seconds, _, _ in runs]
        print(f"{name:58s} {statistics.median(times):9.3f} {max(times):7.3f} {runs[-1][1]:5d} {runs[-1][2]:8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
