"""Calibrate this machine and write ``benchmarks/results/machine.json`` (see ``anisotropy.book.machine``).

    .venv/bin/python benchmarks/machine.py            # ~15-30 s on a slow 2-core machine

Every timing this project reports (README, the book's performance appendix, the build's own report) names the
calibration of the machine it was measured on, so that timings from machines of the same name but of different speed
can be compared. Run it alone on the machine: a second job on the same cores slows every number down (the load
average is recorded beside them).
"""

import argparse
import json
from pathlib import Path

from anisotropy.book import machine

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "machine.json"))
    parser.add_argument("--profile", default="local")
    args = parser.parse_args()
    cal = machine.calibrate(args.profile)
    print(machine.describe(cal))
    Path(args.out).write_text(json.dumps(cal, indent=1) + "\n")
    print(f"written to {args.out}")
