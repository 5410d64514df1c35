"""The package root: the public API imports from it, and importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

import retrieval_pipeline


class TestPublicApi:
    @pytest.mark.parametrize("name", retrieval_pipeline.__all__)
    def test_each_public_name_imports_from_the_package_root(self, name: str) -> None:
        assert getattr(retrieval_pipeline, name) is not None

    def test_build_pipeline_imports_as_architecture_promises(self) -> None:
        from retrieval_pipeline import build_pipeline
        from retrieval_pipeline.graph.builder import build_pipeline as defined

        assert build_pipeline is defined

    def test_an_unknown_name_is_an_attribute_error(self) -> None:
        with pytest.raises(AttributeError, match="no_such_name"):
            retrieval_pipeline.no_such_name  # noqa: B018

    def test_importing_the_package_loads_no_torch_and_no_database_driver(
        self,
    ) -> None:
        assert loaded_after("import retrieval_pipeline") == []

    def test_importing_build_pipeline_loads_no_torch(self) -> None:
        imported = "from retrieval_pipeline import Context, build_pipeline"
        assert "torch" not in loaded_after(imported)


def loaded_after(statement: str) -> list[str]:
    """Which heavy modules a fresh interpreter holds after ``statement``."""
    code = (
        f"import sys\n{statement}\n"
        "heavy = ('torch', 'psycopg', 'langgraph')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return [name for name in result.stdout.strip().split(",") if name]
