"""The repository's generators and importers, run from its root as modules:

    .venv/bin/python -m scripts.make_validation --check

Each rebuilds a shipped file (a doc, a profile, a catalog) from the shipped data, or with
`--check` fails when that file is stale. They are tools of this repository, not part of the
installed package.
"""
