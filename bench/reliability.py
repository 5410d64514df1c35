"""Reliability and security figures: runs the suite's property, fuzz, fault and soak
tests with their figures recorded, and the soak held longer than in CI.

    python bench/reliability.py [--soak-seconds 120]

Writes bench/results/reliability.json (cases tried, faults injected, load held,
leaks and errors found) and regenerates BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "reliability.json"
TESTS = [
    "tests/integration/test_http_security.py",
    "tests/integration/test_vectorstore_security.py",
    "tests/integration/test_ingest_acl.py",
    "tests/integration/test_permission_properties.py",
    "tests/integration/test_hostile_input.py",
    "tests/integration/test_faults.py",
    "tests/integration/test_soak.py",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soak-seconds", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "figures.json"
        env = {
            **os.environ,
            "RP_RELIABILITY_REPORT": str(report),
            "RP_SOAK_SECONDS": str(args.soak_seconds),
            "RETRIEVAL_PIPELINE_HOME": str(Path(tmp) / "home"),
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("DATABASE_URL", None)
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - started
        tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
        figures = json.loads(report.read_text()) if report.exists() else {}
    result = {
        "date": date.today().isoformat(),
        "machine": {"cpus": os.cpu_count()},
        "tests": TESTS,
        "pytest": tail,
        "passed": run.returncode == 0,
        "seconds": round(seconds, 1),
        "figures": figures,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.path.insert(0, str(REPO / "bench"))
    from report import write_benchmarks_md

    write_benchmarks_md()
    if run.returncode != 0:
        print(run.stdout[-4000:], run.stderr[-2000:], file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
