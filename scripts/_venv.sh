# Sourced by scripts/*: create or reuse .venv and install raftlog (editable) with its extras.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
# Every script installs the same extras, so switching between them never reinstalls.
extras="test,compression,spark,jepsen"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "raftlog needs Python >= 3.11 (found: $("$py" --version 2>&1))" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    if ! "$py" -m venv "$venv" 2>/dev/null; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
            "$py" -m venv "$venv"
        else
            echo "cannot create a virtual environment: install python3-venv" >&2
            exit 1
        fi
    fi
fi
stamp="$venv/.raftlog-installed"
want="${extras}:$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -e "$root[$extras]"
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
