# Two entry points on a fresh machine:  `make demo` (train + evaluate on PTB)  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The corpora: $CTXLM_DATA_DIR if set, else ../shared/data beside the checkout if present,
# else ctxlm looks in ~/.cache/ctxlm/data and downloads PTB there.
export CTXLM_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)

.PHONY: demo test test-all bench clean

$(BIN)/ctxlm: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# CPU build of PyTorch, pinned (a plain `torch` would pull the multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,onnx,harness]'
	touch $@

demo: $(BIN)/ctxlm
	rm -rf runs/demo
	$(BIN)/ctxlm train --config configs/demo.toml --run-dir runs/demo

test: $(BIN)/ctxlm
	$(BIN)/ruff check src tests bench probes
	$(BIN)/lint-imports
	# one worker per core, one thread each; a test that hangs (a forked child stuck on a lock) fails after
	# 15 minutes with every thread's stack, rather than holding CI to its limit
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto -m "not slow" --timeout 900

test-all: $(BIN)/ctxlm
	$(BIN)/python -m pytest -q

bench: $(BIN)/ctxlm
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) runs/demo
