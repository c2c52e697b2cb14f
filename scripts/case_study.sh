#!/usr/bin/env bash
# Regenerate docs/CASE_STUDY.md (the paper's case study and the assumption sweep) and its figures.
# The generator is scripts/make_case_study.py; `bash scripts/case_study.sh --check` only verifies
# that the document is current.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" scripts/make_case_study.py "$@"
