"""Slow cross-validations cached under the hashes of everything that produced them.

Claim: a cached result equals what recomputing it gives, as long as its key holds.
Why: every computation cached here is deterministic — seeded folds, no clocks, no randomness
outside fixed seeds — given (i) its input files, (ii) the source code it runs and (iii) the
libraries' versions and its own parameters. The key records (i) as the sha256 of each file,
(ii) as the sha256 of the syntax tree of every `perfmodel` module the computation's entry modules
import, transitively (read with `ast`, function-local imports included, so no import can hide;
docstrings and comments are not part of the tree, so editing prose keeps the key), and its
parameters as JSON. (iii) the library versions are pinned for CI by `.ci/constraints.txt` rather
than keyed: a key on versions would break every clean clone whenever a dependency released.
A generator's `--check` therefore verifies the key and re-renders its document from the cached
numbers in seconds; a changed key fails with the file or module that changed and a "To fix:"
naming the refresh command. `--refresh` recomputes and rewrites the cache.
Checked by: tests/test_cache.py (a changed input, module or parameter invalidates the key, and
the stored numbers round-trip exactly).
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.spec.errors import ShardMeterError, UserInputError
from perfmodel.spec.paths import REPO_ROOT

logger = logging.getLogger(__name__)

MODES = ("use", "check", "refresh")
"""use: the cache when its key holds, else recompute and store; check: the cache, or fail;
refresh: recompute and store."""
FORMAT_VERSION = 1


class StaleCacheError(ShardMeterError):
    """A cached result's key no longer holds (exit 1: the documents are not current)."""

    exit_code = 1


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _code_digest(path: Path) -> str:
    """sha256 of a module's syntax tree without docstrings (comments never reach the tree)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _module_path(module: str) -> Path | None:
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path: Path, module: str) -> set[str]:
    """perfmodel modules `path` imports anywhere in its body (absolute or relative)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] == "perfmodel" and _module_path(n)}
    return found


def code_closure(entries: Iterable[str]) -> dict[str, str]:
    """Every perfmodel module the entry modules import, transitively, with the sha256 of its code
    (parent packages included: importing a module runs its package's `__init__`)."""
    todo = list(entries)
    seen: dict[str, str] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        path = _module_path(module)
        if path is None:
            raise ValueError(f"no source for module {module!r}")
        seen[module] = _code_digest(path)
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        todo += [m for m in (*_imported_modules(path, module), *parents) if m not in seen]
    return dict(sorted(seen.items()))


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheKey:
    """What a cached computation depends on."""

    inputs: Mapping[str, str]
    """Input file (relative to the repository when inside it) -> sha256."""
    code: Mapping[str, str]
    """perfmodel module -> sha256 of its source (`code_closure`)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The computation's own settings (JSON values)."""

    def as_dict(self) -> dict[str, Any]:
        return {"inputs": dict(self.inputs), "code": dict(self.code),
                "params": json.loads(json.dumps(self.params, sort_keys=True))}

    def differences(self, stored: Mapping[str, Any]) -> list[str]:
        """What changed since `stored` (a key's `as_dict`), one phrase each."""
        mine = self.as_dict()
        out = []
        for part in ("inputs", "code"):
            old, new = dict(stored.get(part, {})), mine[part]
            out += [f"{part[:-1] if part == 'inputs' else 'module'} {name} changed"
                    for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
        if stored.get("params") != mine["params"]:
            out.append(f"parameters {stored.get('params')} -> {mine['params']}")
        return out


def _shown(path: Path) -> str:
    resolved = path.resolve()
    return (str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT)
            else str(resolved))


def cache_key(inputs: Sequence[str | Path], entries: Sequence[str],
              params: Mapping[str, Any] | None = None) -> CacheKey:
    """The key of a computation reading `inputs` and running `entries` (perfmodel modules)."""
    return CacheKey(inputs={_shown(Path(p)): _sha256(Path(p)) for p in inputs},
                    code=code_closure(entries), params=dict(params or {}))


@dataclass(frozen=True, kw_only=True, slots=True)
class ResultCache:
    """A folder of cached results (one JSON file per computation) and how to use it."""

    folder: Path
    """Where the results live (shipped: catalogs/cv-cache)."""
    mode: str = "use"
    """One of MODES."""
    refresh_command: str = "rerun the generator with --refresh"
    """Named in the "To fix:" line of a stale key."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserInputError(f"cache mode {self.mode!r}", hint=f"use one of {MODES}.")

    def get(self, name: str, key: CacheKey, compute: Callable[[], Any]) -> Any:
        """The result called `name`: cached when `key` holds (and the mode allows), else
        recomputed with `compute` (which must return JSON values) and stored."""
        path = self.folder / f"{name}.json"
        stored = json.loads(path.read_text()) if path.is_file() else None
        current = (stored is not None and stored.get("format") == FORMAT_VERSION
                   and stored.get("key") == key.as_dict())
        if stored is not None and current and self.mode != "refresh":
            return stored["result"]
        if self.mode == "check":
            why = (["no cached result"] if stored is None
                   else key.differences(stored.get("key", {})) or ["format changed"])
            raise StaleCacheError(f"{_shown(path)}: the cached '{name}' is stale ("
                                  + "; ".join(why[:5]) + (" …" if len(why) > 5 else "") + ")",
                                  hint=f"{self.refresh_command} (it recomputes and rewrites "
                                       f"{_shown(path)}).")
        logger.info("computing %s (%s)", name, "refresh" if current else "key changed")
        result = compute()
        self.folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"format": FORMAT_VERSION, "key": key.as_dict(), "result": result},
                          indent=1, sort_keys=True, allow_nan=True)
        path.write_text(text + "\n")
        return json.loads(text)["result"]
