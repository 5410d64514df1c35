"""Reliability figures for BENCHMARKS.md.

Tests call :func:`record_figure` with what they tried (cases generated, faults
injected, load held). Nothing is written unless ``RP_RELIABILITY_REPORT`` names a JSON
file, which ``bench/reliability.py`` sets before it runs the suite.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()


def record_figure(name: str, value: Any, **details: Any) -> None:
    """Merge ``{name: {"value": value, **details}}`` into the report file, if any."""
    target = os.environ.get("RP_RELIABILITY_REPORT")
    if not target:
        return
    path = Path(target)
    with _lock:
        data = json.loads(path.read_text()) if path.exists() else {}
        data[name] = {"value": value, **details}
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
