"""Frozen dataclasses built from parsed YAML, every value checked against its annotation.

:func:`build` accepts a mapping whose keys are the dataclass's fields (nested dataclasses
from nested mappings) and values of the annotated types (``bool``, ``int``, ``float``,
``str``, ``Literal``, optionals and ``tuple[X, ...]`` from lists); anything else is a
:class:`~voice_pipeline.errors.ConfigError` that names the key (``vad.threshold``) and
says what was expected. :func:`read_yaml` reads a file with errors of the same kind.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from voice_pipeline.errors import ConfigError


def check(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return check(arg, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if origin is tuple:
        (item,) = typing.get_args(tp)[:1]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(check(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    raise ConfigError(f"{where}: unsupported type {tp!r}")  # pragma: no cover


def build(cls: type[Any], data: Any, where: str) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        tp = hints[name]
        key = f"{where}.{name}" if where else name
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, value, key)  # type: ignore[arg-type]
        else:
            kwargs[name] = check(tp, value, key)
    return cls(**kwargs)


def read_yaml(path: Path) -> Any:
    """The file's YAML; ConfigError if unreadable, not UTF-8, not YAML, or if a mapping has
    a key that is not a string (``250:``; ``on:``, ``no:`` are booleans in YAML 1.1)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} on line {line})"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from exc
    _check_keys(data, path, "")
    return data


def _check_keys(data: Any, path: Path, where: str) -> None:
    if isinstance(data, list):
        for i, item in enumerate(data):
            _check_keys(item, path, f"{where}[{i}]")
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        if not isinstance(key, str):
            hint = " (YAML reads on/off/yes/no as booleans: quote it)" if isinstance(key, bool) else ""
            raise ConfigError(f"{path}: key {key!r}{' in ' + where if where else ''} is not a string{hint}")
        _check_keys(value, path, f"{where}.{key}" if where else key)
