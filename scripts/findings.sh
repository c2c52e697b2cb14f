#!/usr/bin/env bash
# Regenerates docs/FINDINGS.md. The generator is scripts/make_findings.py (a Python script, so
# that every conclusion sentence is computed from results); this wrapper is kept for old habits.
#
# Run from anywhere:  scripts/findings.sh [--check]   (about two minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m scripts.make_findings "$@"
