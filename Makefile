# Every target creates (or reuses) the virtual environment at .venv first, so each
# works on a fresh machine with nothing installed but Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned (in the `local` extra) to the CPU wheel; never let pip pick a CUDA build.
EXTRAS := local,eval,onnx,dev
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# The demo keeps its database inside the checkout unless told otherwise.
DEMO_HOME ?= $(CURDIR)/.rp_home
DEMO_QUESTION ?= Who owns the service that failed with ERR_CONN_RESET in v2.3.1?

.PHONY: venv bench-venv demo test test-unit test-integration lint format bench \
	bench-ingest bench-quality bench-latency bench-fusion bench-pipeline clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0 -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-*
	touch $@

demo: venv
	RETRIEVAL_PIPELINE_HOME=$(DEMO_HOME) $(BIN)/retrieval-pipeline ingest examples/sample_corpus
	RETRIEVAL_PIPELINE_HOME=$(DEMO_HOME) $(BIN)/retrieval-pipeline query "$(DEMO_QUESTION)" --limit 5
	RETRIEVAL_PIPELINE_HOME=$(DEMO_HOME) $(BIN)/retrieval-pipeline query "$(DEMO_QUESTION)" --limit 5 --principals security
	@echo "The embedded database keeps running for the next command; stop it with:"
	@echo "  RETRIEVAL_PIPELINE_HOME=$(DEMO_HOME) $(BIN)/retrieval-pipeline db stop"

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# mypy cannot follow setuptools' editable import hook, so type-check a symlinked
	@# tree laid out the way the package installs (retrieval_pipeline.graph, ...).
	rm -rf build/typecheck && mkdir -p build/typecheck/retrieval_pipeline
	for f in retrieval_pipeline/*.py retrieval_pipeline/py.typed; do ln -s ../../../$$f build/typecheck/retrieval_pipeline/; done
	for d in graph nodes tools ingest eval; do ln -s ../../../$$d build/typecheck/retrieval_pipeline/$$d; done
	cd build/typecheck && ../../$(BIN)/mypy --config-file ../../pyproject.toml -p retrieval_pipeline

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/pytest -q tests

test-unit: venv
	$(BIN)/pytest -q tests/unit

test-integration: venv
	$(BIN)/pytest -q tests/integration

# The whole benchmark suite (about 45 minutes on 2 cores: it embeds four corpora once,
# into bench/.cache, then reuses them). Each writes bench/results/*.json and
# regenerates BENCHMARKS.md.
bench: bench-ingest bench-quality bench-fusion bench-latency bench-pipeline

bench-venv: venv
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS),bench]'

bench-ingest: bench-venv
	$(BIN)/python bench/ingest.py --keep

bench-quality: bench-venv
	$(BIN)/python bench/quality.py

bench-fusion: bench-venv
	$(BIN)/python bench/fusion.py

bench-latency: bench-venv
	$(BIN)/python bench/latency.py

bench-pipeline: bench-venv
	$(BIN)/python bench/pipeline.py

clean:
	rm -rf $(VENV) .rp_home .pytest_cache .mypy_cache .ruff_cache build *.egg-info
