# Two commands set everything up on a fresh clone:
#   make predict   creates .venv, installs simdl (no torch), runs the default prediction
#   make test      installs the test extras (torch included) and runs the whole suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: predict test bench clean

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

bench: $(VENV)/.core-installed
	$(PY) benchmarks/bench_predict.py

clean:
	rm -rf $(VENV) build *.egg-info
