#!/usr/bin/env bash
# The Python client the server tests drive `locus serve` with: OpenAI's own package from PyPI,
# in a virtual environment under target/ (no root needed; a no-op once installed).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/pyclient
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import openai' 2>/dev/null; then
    exit 0
fi
if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian's python3 keeps venv in a package of its own.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -q && apt-get install -y -q python3-venv
    fi
    rm -rf "$venv"
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check 'openai>=1.40,<3'
"$venv/bin/python" -c 'import openai; print("openai", openai.__version__, "installed in target/pyclient")'
