#!/usr/bin/env bash
# One command from a clean clone to a working Rulekeeper: environment, LLM runtime, project,
# browser for the UI tests, verified models, search index. Safe and quick to re-run: each
# step checks whether its result is already there before doing any work.
#
#   bash scripts/setup.sh
#
# Uses $VIRTUAL_ENV when one is active, else creates ./.venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TORCH_VERSION="2.13.0"
LLAMA_VERSION="0.3.36"
# llama.cpp is compiled for the CPU it is installed on, from flags named here rather than
# GGML_NATIVE: a native build picks up AMX on these Xeons and segfaults on first generation
# (ggml_backend_amx_mul_mat). AVX2 is the floor; AVX512 (and its VNNI, VBMI and BF16
# extensions) is added when /proc/cpuinfo lists it, which reads prompts about 1.3x faster.
# RULEKEEPER_LLAMA_CMAKE_ARGS overrides the lot (e.g. to build for other machines).
cpu_has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }
llama_cmake_args() {
  local args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
  args+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  if cpu_has avx512f && cpu_has avx512cd && cpu_has avx512vl && cpu_has avx512dq &&
    cpu_has avx512bw; then
    args+=" -DGGML_AVX512=ON"
    local extension
    for extension in avx512vbmi:VBMI avx512_vnni:VNNI avx512_bf16:BF16; do
      if cpu_has "${extension%%:*}"; then args+=" -DGGML_AVX512_${extension##*:}=ON"; fi
    done
  else
    args+=" -DGGML_AVX512=OFF"
  fi
  printf '%s' "$args"
}
LLAMA_CMAKE_ARGS="${RULEKEEPER_LLAMA_CMAKE_ARGS:-$(llama_cmake_args)}"

START_ALL=$SECONDS
SECTION_START=$SECONDS
section() {
  SECTION_START=$SECONDS
  printf '\n==> %s\n' "$1"
}
done_section() {
  printf '    done in %ss\n' "$((SECONDS - SECTION_START))"
}
warn() {
  printf 'WARNING: %s\n' "$1" >&2
}

# ---------------------------------------------------------------------------------------
section "Python environment"
if [[ -n "${VIRTUAL_ENV:-}" ]]; then
  VENV="$VIRTUAL_ENV"
  echo "    using the active virtualenv $VENV"
else
  VENV="$ROOT/.venv"
  if [[ ! -x "$VENV/bin/python" ]]; then
    BASE_PY="$(command -v python3.11 || command -v python3)"
    "$BASE_PY" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' ||
      { echo "Rulekeeper needs Python 3.11 or newer ($BASE_PY is older)." >&2; exit 1; }
    "$BASE_PY" -m venv "$VENV"
    echo "    created $VENV with $("$VENV/bin/python" --version)"
  else
    echo "    reusing $VENV ($("$VENV/bin/python" --version))"
  fi
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip)
export PATH="$VENV/bin:$PATH"
done_section

# ---------------------------------------------------------------------------------------
section "torch $TORCH_VERSION (CPU)"
# Installed first and pinned: an unpinned torch, pulled in by sentence-transformers, would
# be a multi-GB CUDA build. The CPU wheel of this version is on this machine's disk.
# (Read from the metadata: importing torch to ask would cost seconds on every re-run.)
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "    already installed"
else
  "${PIP[@]}" install --quiet "torch==$TORCH_VERSION"
fi
done_section

# ---------------------------------------------------------------------------------------
section "llama-cpp-python $LLAMA_VERSION (CPU build for this machine)"
echo "    flags: $LLAMA_CMAKE_ARGS"
# The flags an installed build was made with are kept beside it, so a build made with other
# flags (an older setup, another CPU's) is replaced rather than reused.
LLAMA_STAMP="$VENV/.llama-cmake-args"
has_llama() {
  [[ -f "$LLAMA_STAMP" && "$(cat "$LLAMA_STAMP")" == "$LLAMA_CMAKE_ARGS" ]] &&
    "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('llama-cpp-python') != '$LLAMA_VERSION')" 2>/dev/null &&
    "$PY" -c "import llama_cpp" 2>/dev/null
}
if has_llama; then
  echo "    already installed"
else
  # The build takes about 5 minutes on 2 cores, so the wheel is kept, keyed by the build
  # flags: pip's own wheel cache ignores CMAKE_ARGS and could hand back a native (AMX) build.
  FLAGS_KEY="$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
  WHEEL_DIR="${RULEKEEPER_WHEEL_CACHE:-$HOME/.cache/rulekeeper/wheels}/llama-cpp-python-$LLAMA_VERSION-$FLAGS_KEY"
  if ! compgen -G "$WHEEL_DIR/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
    echo "    building (about 5 minutes) into $WHEEL_DIR"
    mkdir -p "$WHEEL_DIR"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "${PIP[@]}" wheel --quiet --no-deps --no-cache-dir \
      -w "$WHEEL_DIR" "llama-cpp-python==$LLAMA_VERSION"
  else
    echo "    reusing the wheel built earlier in $WHEEL_DIR"
  fi
  # Same version, other build: pip would keep the installed one.
  "${PIP[@]}" uninstall --quiet --yes llama-cpp-python 2>/dev/null || true
  "${PIP[@]}" install --quiet "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
  printf '%s' "$LLAMA_CMAKE_ARGS" >"$LLAMA_STAMP"
fi
done_section

# ---------------------------------------------------------------------------------------
section "Rulekeeper and its dependencies (editable, with dev tools)"
# pip's dependency resolution costs many seconds even when nothing changes, so it is skipped
# while pyproject.toml and the checkout it was installed from are unchanged.
STAMP="$VENV/.rulekeeper-install"
WANT="$(sha256sum pyproject.toml | cut -c1-64) $ROOT"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] &&
  "$PY" -c "import importlib.metadata as m; m.version('rulekeeper')" 2>/dev/null; then
  echo "    up to date"
else
  "${PIP[@]}" install --quiet -e ".[dev]"
  printf '%s' "$WANT" >"$STAMP"
fi
done_section

# ---------------------------------------------------------------------------------------
# Debian packages, as root or through a password-less sudo; false when they cannot be had.
APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo=()
  if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null 2>&1; then sudo=(sudo -n); fi
  if [[ "$APT_UPDATED" == 0 ]]; then
    "${sudo[@]}" apt-get update -qq || return 1
    APT_UPDATED=1
  fi
  "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
}

section "Chromium for the browser tests"
# Playwright drives the system Chromium; `playwright install` would download a browser
# build from outside the package registries, which is not reachable here.
if [[ -x /usr/bin/chromium ]]; then
  echo "    already installed"
elif apt_install chromium chromium-driver; then
  echo "    installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
else
  warn "could not install chromium with apt-get; the browser tests will be skipped."
fi
# A Chinese font, so that the Chinese views are drawn as a player sees them rather than as
# empty boxes (the screenshots the browser tests leave are looked at).
if command -v fc-list >/dev/null 2>&1 && [[ -z "$(fc-list :lang=zh 2>/dev/null)" ]]; then
  apt_install fonts-wqy-microhei || warn "could not install a Chinese font with apt-get."
fi
done_section

# ---------------------------------------------------------------------------------------
section "redis-server for the shared-state tests"
# Tests start their own redis-server on a free loopback port; no system service is used.
if command -v redis-server >/dev/null 2>&1; then
  echo "    already installed"
elif apt_install redis-server; then
  echo "    installed $(redis-server --version | cut -d' ' -f1-3)"
else
  warn "could not install redis-server with apt-get; the Redis tests will be skipped."
fi
done_section

# ---------------------------------------------------------------------------------------
section "Models (verified by sha256; see 'rules models list')"
rules models fetch --defaults
done_section

# ---------------------------------------------------------------------------------------
section "Search index"
if rules index --help >/dev/null 2>&1; then
  rules index
else
  echo "    'rules index' is not available yet; skipped"
fi
done_section

printf '\nRulekeeper is set up in %ss. Activate with: source %s/bin/activate\n' \
  "$((SECONDS - START_ALL))" "$VENV"
