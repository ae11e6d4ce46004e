# Two commands set everything up on a fresh clone:
#   make predict   creates .venv, installs simdl (no torch), runs the default prediction
#   make test      installs the test extras (torch included) and runs the whole suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: predict test lint typecheck bench clean gpu-wheels

$(PY):
	$(PYTHON) -m venv $(VENV)

# Stamp files make re-runs fast; they are redone when pyproject.toml changes.
$(VENV)/.core-installed: pyproject.toml | $(PY)
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(PY)
	$(PIP) install -q -e '.[test]'
	touch $@ $(VENV)/.core-installed

predict: $(VENV)/.core-installed
	$(VENV)/bin/simdl predict --model vgg16 --strategy fsdp --gpus 4

test: $(VENV)/.test-installed
	$(PY) -m pytest -q

# ruff and mypy read their settings from pyproject.toml ([tool.ruff], [tool.mypy]).
# .ci/run calls both; the versions are pinned in the test extra so a new release cannot turn CI red.
lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.test-installed
	$(VENV)/bin/mypy

bench: $(VENV)/.core-installed
	$(PY) benchmarks/bench_predict.py

# Pure-Python wheels a GPU machine without internet lacks (validate/README.md, "GPU ground
# truth"): downloaded here into the git-ignored .whl/ and carried there. validate.gpu_check
# itself does not need them (the analytic engine only); simpy serves --engines analytic,sim.
GPU_WHEELS ?= simpy==4.1.2
gpu-wheels:
	$(PYTHON) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
	  --platform any -d .whl $(GPU_WHEELS)

clean:
	rm -rf $(VENV) build *.egg-info
