"""The public surface of rollout_client: a sorted, complete __all__; no caller needs a private module."""

from __future__ import annotations

import dataclasses
import inspect

import rollout_client
from rollout_client import _errors, _records, _results


def test_all_is_sorted_unique_and_importable() -> None:
    """__all__ is in isort order (CONSTANTS first), names each export once, and each name exists."""
    names = list(rollout_client.__all__)
    assert names == sorted(names, key=lambda name: (not name.isupper(), name))
    assert len(names) == len(set(names))
    assert all(hasattr(rollout_client, name) for name in names)


def test_every_error_and_result_type_is_exported() -> None:
    """Each exception of _errors, each result dataclass and each record type is in __all__."""
    exported = set(rollout_client.__all__)
    errors = {
        name
        for name, obj in vars(_errors).items()
        if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == _errors.__name__
    }
    results = {name for name, obj in vars(_results).items() if dataclasses.is_dataclass(obj)}
    records = {name for name, obj in vars(_records).items() if dataclasses.is_dataclass(obj)}
    details = {"ErrorInfo", "FieldViolation", "PreconditionViolation"}
    assert errors | results | records | details <= exported
