# Every target creates (or reuses) the virtual environment at .venv first, so each
# works on a fresh machine with nothing installed but Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned (in the `local` extra) to the CPU wheel; never let pip pick a CUDA build.
EXTRAS := local,eval,onnx,serve,langchain-postgres,documents,dev
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# The demo keeps its database inside the checkout unless told otherwise.
DEMO_HOME ?= $(CURDIR)/.rp_home
DEMO_QUESTION ?= Who owns the service that failed with ERR_CONN_RESET in v2.3.1?

.PHONY: venv studio-venv bench-venv demo test test-unit test-integration test-studio chromium \
	serve studio lint format bench eval-check eval-report \
	bench-ingest bench-quality bench-latency bench-fusion bench-pipeline bench-serve bench-interop bench-reliability bench-scale clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0 -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-*
	touch $@

# LangGraph Studio's server (langgraph-cli[inmem]) needs sse-starlette>=2 and LangServe
# pins <2, so it gets its own environment: a venv whose own site-packages (the studio
# extra) come first, layered over .venv's for everything else (torch is not installed
# twice).
STUDIO_VENV := .venv-studio
STUDIO_STAMP := $(STUDIO_VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

studio-venv: $(STUDIO_STAMP)

$(STUDIO_STAMP): $(STAMP)
	test -x $(STUDIO_VENV)/bin/python || $(PYTHON) -m venv $(STUDIO_VENV)
	base=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	site=$$($(STUDIO_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	echo "import site; site.addsitedir('$$base')" > "$$site/zz_base_venv.pth"
	$(STUDIO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(STUDIO_VENV)/bin/python -m pip install --quiet -e '.[studio]'
	rm -f $(STUDIO_VENV)/.installed-*
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
	@# mypy cannot follow setuptools' editable import hook, so it checks the package as it
	@# installs: a non-editable copy (the same wheel users get) under build/typecheck. The
	@# folder-to-package mapping lives only in pyproject.toml. The cache stays outside the
	@# copy, so a rerun only re-checks what changed.
	rm -rf build/typecheck build/lib
	@# Offline when the venv has setuptools (Python 3.11's venv does; 3.12's does not).
	isolation=$$($(BIN)/python -c 'import setuptools' 2>/dev/null && echo --no-build-isolation); \
	$(BIN)/python -m pip install --quiet --no-deps $$isolation --target build/typecheck .
	cd build/typecheck && ../../$(BIN)/mypy --config-file ../../pyproject.toml \
		--cache-dir ../../.mypy_cache -p retrieval_pipeline

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/pytest -q tests
	$(MAKE) test-studio

# Debian's chromium + chromedriver for tests/browser (the playground in a real browser).
# Installed with apt-get when missing; without apt (or root/sudo) this only says so,
# and pytest then reports the browser test as skipped with that reason.
chromium:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		echo "chromium and chromedriver present"; \
	elif ! command -v apt-get >/dev/null; then \
		echo "WARNING: no apt-get: chromium not installed; the browser test will be SKIPPED"; \
	else \
		sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo -n"; \
		{ $$sudo apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium chromium-driver; } \
		|| echo "WARNING: apt-get could not install chromium; the browser test will be SKIPPED"; \
	fi

test-studio: studio-venv
	RP_REQUIRE_STUDIO=1 $(STUDIO_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/studio

# Regression gate: a fresh run of the ablation ladder on the smallest data set against
# the committed baseline; fails on a statistically significant nDCG@10 drop.
EVAL_CHECK_DATASET ?= ../shared/data/multihop/musique
eval-check: venv
	$(BIN)/retrieval-pipeline eval check --dataset $(EVAL_CHECK_DATASET) --title-entities musique

# The full evaluation report (HTML + markdown + JSON) on every data set in ../shared.
EVAL_DATASETS ?= ../shared/data/scifact ../shared/data/nfcorpus \
	../shared/data/multihop/hotpotqa ../shared/data/multihop/musique
EVAL_REPORT_OUT ?= reports/eval
eval-report: venv
	$(BIN)/retrieval-pipeline eval report $(addprefix --dataset ,$(EVAL_DATASETS)) \
		--title-entities hotpotqa --title-entities musique --out $(EVAL_REPORT_OUT)

# The LangServe endpoint on 127.0.0.1:8000 (playground: /retrieve/playground/).
serve: venv
	$(BIN)/retrieval-pipeline serve

# LangGraph Studio's local server for both graphs in langgraph.json.
studio: studio-venv
	$(STUDIO_VENV)/bin/langgraph dev --no-reload

test-unit: venv
	$(BIN)/pytest -q tests/unit

test-integration: venv
	$(BIN)/pytest -q tests/integration

# The whole benchmark suite (about 45 minutes on 2 cores: it embeds four corpora once,
# into bench/.cache, then reuses them). Each writes bench/results/*.json and
# regenerates BENCHMARKS.md.
bench: bench-ingest bench-quality bench-fusion bench-latency bench-pipeline bench-serve bench-interop bench-reliability

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

bench-serve: bench-venv
	$(BIN)/python bench/serve.py

bench-interop: bench-venv
	$(BIN)/python bench/interop.py

bench-reliability: bench-venv
	$(BIN)/python bench/reliability.py

# Needs the SciFact vectors in bench/.cache/home (bench-quality or eval-report).
bench-scale: bench-venv
	$(BIN)/python bench/scale.py

clean:
	rm -rf $(VENV) $(STUDIO_VENV) .langgraph_api .rp_home .pytest_cache .mypy_cache .ruff_cache build *.egg-info
