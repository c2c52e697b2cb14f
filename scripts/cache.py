"""The generators' shared cache of slow cross-validations (catalogs/cv-cache,
`perfmodel.profiles.cache`): one mode per run, set from the command line."""

from __future__ import annotations

from pathlib import Path

from perfmodel.profiles.cache import ResultCache

CACHE_DIR = Path(__file__).resolve().parent.parent / "catalogs" / "cv-cache"
"""Where the cached results are shipped."""

_MODE = {"mode": "use"}


def set_cache_mode(mode: str) -> None:
    """use (default), check (--check: never recompute) or refresh (--refresh)."""
    _MODE["mode"] = mode


def cv_cache(generator: str = "make_validation") -> ResultCache:
    """The shipped cache in this run's mode; a stale key names `generator`'s refresh."""
    return ResultCache(folder=CACHE_DIR, mode=_MODE["mode"],
                       refresh_command=f"run `.venv/bin/python -m scripts.{generator} --refresh`")
