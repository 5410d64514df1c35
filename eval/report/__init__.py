"""The evaluation report: per-stage ablation, slices, failure diagnosis, plots.

- ``ladder``: the ablation ladder's steps and one pipeline step over a data set;
- ``diagnosis``: slices, failure diagnosis, assembly metrics, negative and
  permission probes;
- ``dataset``: everything measured on one data set (``run_dataset``);
- ``rendering``: report.md, report.html and report.json;
- ``gate``: the regression gate against a committed baseline.
"""

from retrieval_pipeline.eval.report.dataset import (
    NEGATIVES,
    OFF_TOPIC,
    DatasetReport,
    run_dataset,
)
from retrieval_pipeline.eval.report.diagnosis import (
    CAUSES,
    assembly_metrics,
    build_slices,
    diagnose,
)
from retrieval_pipeline.eval.report.gate import check_against_baseline
from retrieval_pipeline.eval.report.ladder import (
    HEADLINE,
    KS,
    LIMIT,
    Step,
    StepResult,
    ladder,
)
from retrieval_pipeline.eval.report.rendering import (
    html_page,
    markdown,
    plots,
    write_outputs,
    write_report,
)

__all__ = [
    "CAUSES",
    "HEADLINE",
    "KS",
    "LIMIT",
    "NEGATIVES",
    "OFF_TOPIC",
    "DatasetReport",
    "Step",
    "StepResult",
    "assembly_metrics",
    "build_slices",
    "check_against_baseline",
    "diagnose",
    "html_page",
    "ladder",
    "markdown",
    "plots",
    "run_dataset",
    "write_outputs",
    "write_report",
]
