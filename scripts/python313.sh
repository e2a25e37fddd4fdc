# Sourced by scripts that need a Python >= 3.13 of their own (mongoeco, Django 6).
# find_python313 prints one (pyenv's 3.13.0 first), or returns 1.
find_python313() {
  local candidates=()
  command -v pyenv >/dev/null 2>&1 && candidates+=("$(pyenv root)/versions/3.13.0/bin/python3.13")
  candidates+=("$HOME/.pyenv/versions/3.13.0/bin/python3.13" python3.13 python3.14 python3)
  for py in "${candidates[@]}"; do
    if PYENV_VERSION=3.13.0 "$py" -c 'import sys; sys.exit(sys.version_info < (3, 13))' 2>/dev/null; then
      command -v "$py" 2>/dev/null || echo "$py"
      return 0
    fi
  done
  return 1
}
