"""Typed errors. User mistakes exit 2, infeasible plans exit 1; neither prints a traceback.

Every message names what was wrong (file, field, value) and ends with a "To fix:" line.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ShardMeterError(Exception):
    """Base class of every error the CLI reports without a traceback."""

    exit_code: int = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(self.__str__())

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\nTo fix: {self.hint}"
        return self.message


class UserInputError(ShardMeterError, ValueError):
    """Bad input given by the user (exit code 2). Also a ValueError for library callers."""

    exit_code = 2


class CatalogError(UserInputError):
    """Unknown catalog name or malformed catalog row."""


class ConfigError(UserInputError):
    """Malformed model configuration (e.g. a Hugging Face config.json)."""


class DatasetError(UserInputError):
    """Malformed benchmark dataset (missing column, negative time, unknown phase)."""


class ProfileError(UserInputError):
    """Malformed or missing hardware profile."""


class InstanceError(UserInputError):
    """Malformed planner instance file."""


class InfeasibleError(ShardMeterError):
    """No plan satisfies the limits; `binding` names the limit that binds (exit code 1)."""

    exit_code = 1

    def __init__(self, message: str, *, binding: str, hint: str | None = None) -> None:
        self.binding = binding
        super().__init__(message, hint=hint)


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    """A "did you mean" phrase listing the closest catalog names (case-insensitive)."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.4)
    if not close:
        close = [c for c in lowered if name.lower() in c][:n]
    if close:
        return "did you mean " + ", ".join(repr(lowered[c]) for c in close) + "?"
    return "known names: " + ", ".join(sorted(choices)[:12]) + (" …" if len(choices) > 12 else "")


LISTING_COMMANDS = {"model": "catalog models", "gpu": "catalog gpus", "link": "catalog links",
                    "price provider": "catalog prices", "price list": "catalog prices"}
"""The `shardmeter` command listing each kind of catalog name."""


def unknown_name(kind: str, name: str, choices: Iterable[str], *, where: str) -> CatalogError:
    """The standard error for an unknown catalog entry, with suggestions."""
    choices = list(choices)
    listing = LISTING_COMMANDS.get(kind, "catalog --help")
    return CatalogError(
        f"unknown {kind} {name!r} in {where}; {did_you_mean(name, choices)}",
        hint=f"use one of the names listed by `shardmeter {listing}`, or add a row to {where}.",
    )
