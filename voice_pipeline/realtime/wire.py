"""Reading client JSON safely: the guarded decoder and a typed field reader (pure).

:func:`load_object` turns one text frame into a ``dict`` or raises
:class:`~voice_pipeline.realtime.errors.RealtimeClientError`: frames over the
size limit, invalid JSON, ``NaN``/``Infinity``/``1e999``, numbers of more than
:data:`MAX_NUMBER_CHARS` characters, nesting deeper than :data:`MAX_DEPTH` and
anything but an object are refused before any field is looked at (the ``/ws``
and Twilio parsers were fuzzed into exactly those failures).

:class:`Fields` reads one JSON object with the path of every field for the
error's ``param``: unknown keys, missing or ill-typed fields, strings that are
not valid Unicode (lone surrogates could not be sent back) all raise.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterator
from typing import Any, Final

from voice_pipeline.realtime.errors import ErrorCode, quote, refuse

#: deepest nesting of arrays/objects accepted (a tool's JSON schema is the deepest thing sent)
MAX_DEPTH: Final = 32
#: longest number literal accepted (int(<5000 digits>) is slow, and no field needs one)
MAX_NUMBER_CHARS: Final = 40
#: longest string field accepted unless a field says otherwise (~ tens of thousands of tokens)
MAX_TEXT_CHARS: Final = 65536
_SURROGATE = re.compile("[\ud800-\udfff]")

Json = dict[str, Any]


class _BadNumber(ValueError):
    pass


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _BadNumber(text)
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise _BadNumber(text)
    return value


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _BadNumber(text)
    return int(text)


def _parse_constant(text: str) -> float:
    raise _BadNumber(text)  # NaN, Infinity, -Infinity: not JSON


def _depth_ok(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterator[Any] = iter(item.values())
        elif isinstance(item, list):
            children = iter(item)
        else:
            continue
        if depth > MAX_DEPTH:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def load_object(frame: str | bytes, max_bytes: int) -> Json:
    """One frame -> its JSON object. Binary frames are read as UTF-8 JSON too."""
    if len(frame) > max_bytes:
        raise refuse(ErrorCode.EVENT_TOO_LARGE, f"event of {len(frame)} bytes; at most {max_bytes}")
    if isinstance(frame, bytes):
        try:
            frame = frame.decode("utf-8")
        except UnicodeDecodeError:
            raise refuse(ErrorCode.INVALID_JSON, "a binary frame must hold UTF-8 JSON") from None
    try:
        value = json.loads(
            frame, parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant
        )
    except _BadNumber as exc:
        raise refuse(
            ErrorCode.INVALID_JSON,
            f"unusable number {quote(str(exc))}: numbers must be finite and at most "
            f"{MAX_NUMBER_CHARS} characters",
        ) from None
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." deeper than json goes
        raise refuse(ErrorCode.INVALID_JSON, "every frame must hold one JSON object (an event)") from None
    if not isinstance(value, dict):
        raise refuse(ErrorCode.INVALID_EVENT, "an event must be a JSON object with a 'type'")
    if not _depth_ok(value):
        raise refuse(ErrorCode.INVALID_EVENT, f"an event may not nest deeper than {MAX_DEPTH} levels")
    return value


def json_type(value: object) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def decode_base64(text: str, param: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise refuse(ErrorCode.INVALID_BASE64, f"'{param}' is not valid base64", param) from None


class Fields:
    """One JSON object of a client event, read field by field. ``path`` prefixes ``param``.

    ``known`` are all the keys the object may have (others raise ``unknown_parameter``);
    ``ignored`` are keys accepted and never read (read-only fields a client echoes back).
    """

    def __init__(
        self, data: Json, path: str, known: frozenset[str], ignored: frozenset[str] = frozenset()
    ) -> None:
        self.data = data
        self.path = path
        for key in data:
            if key not in known and key not in ignored:
                raise refuse(
                    ErrorCode.UNKNOWN_PARAMETER,
                    f"unknown parameter '{self.param(str(key))}'",
                    self.param(key),
                )

    def param(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str) -> Any:
        """The raw value (None if absent or null)."""
        return self.data.get(key)

    def is_null(self, key: str) -> bool:
        return key in self.data and self.data[key] is None

    def _value(self, key: str, required: bool, expected: str) -> Any:
        value = self.data.get(key)
        if value is None:  # absent or null
            if required:
                raise refuse(
                    ErrorCode.MISSING_PARAMETER,
                    f"missing required parameter '{self.param(key)}' ({expected})",
                    self.param(key),
                )
            return None
        return value

    def wrong_type(self, key: str, expected: str) -> Exception:
        value = self.data.get(key)
        return refuse(
            ErrorCode.INVALID_TYPE,
            f"invalid type for '{self.param(key)}': expected {expected}, got {json_type(value)}",
            self.param(key),
        )

    def text(self, key: str, *, required: bool = False, max_chars: int = MAX_TEXT_CHARS) -> str | None:
        value = self._value(key, required, "a string")
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.wrong_type(key, "a string")
        if len(value) > max_chars:
            raise refuse(
                ErrorCode.INVALID_VALUE,
                f"'{self.param(key)}' is {len(value)} characters long; at most {max_chars}",
                self.param(key),
            )
        if _SURROGATE.search(value):
            raise refuse(
                ErrorCode.INVALID_VALUE, f"'{self.param(key)}' is not valid Unicode", self.param(key)
            )
        return value

    def required_text(self, key: str, *, max_chars: int = MAX_TEXT_CHARS) -> str:
        value = self.text(key, required=True, max_chars=max_chars)
        assert value is not None
        return value

    def integer(self, key: str, *, required: bool = False, low: int = 0, high: int = 2**31) -> int | None:
        value = self._value(key, required, "an integer")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.wrong_type(key, "an integer")
        if isinstance(value, float):
            if not value.is_integer():
                raise self.wrong_type(key, "an integer")
            value = int(value)
        if not low <= value <= high:
            raise refuse(
                ErrorCode.INVALID_VALUE,
                f"'{self.param(key)}' must be {low}..{high}, got {value}",
                self.param(key),
            )
        return int(value)

    def number(self, key: str, *, required: bool = False) -> float | None:
        value = self._value(key, required, "a number")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.wrong_type(key, "a number")
        return float(value)

    def boolean(self, key: str) -> bool | None:
        value = self._value(key, False, "a boolean")
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.wrong_type(key, "a boolean")
        return value

    def obj(
        self,
        key: str,
        known: frozenset[str],
        *,
        required: bool = False,
        ignored: frozenset[str] = frozenset(),
    ) -> Fields | None:
        value = self._value(key, required, "an object")
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.wrong_type(key, "an object")
        return Fields(value, self.param(key), known, ignored)

    def array(self, key: str, *, required: bool = False, max_items: int = 256) -> list[Any] | None:
        value = self._value(key, required, "an array")
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.wrong_type(key, "an array")
        if len(value) > max_items:
            raise refuse(
                ErrorCode.INVALID_VALUE,
                f"'{self.param(key)}' has {len(value)} entries; at most {max_items}",
                self.param(key),
            )
        return value

    def choice(self, key: str, allowed: tuple[str, ...], *, required: bool = False) -> str | None:
        value = self._value(key, required, "a string")
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.wrong_type(key, "a string")
        if value not in allowed:
            raise refuse(
                ErrorCode.INVALID_VALUE,
                f"invalid value for '{self.param(key)}': {quote(value)}; "
                f"supported values: {', '.join(allowed)}",
                self.param(key),
            )
        return value

    def required_choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.choice(key, allowed, required=True)
        assert value is not None
        return value


def element(value: Any, path: str, known: frozenset[str], ignored: frozenset[str] = frozenset()) -> Fields:
    """An array element that must be an object (``path`` is e.g. ``item.content[2]``)."""
    if not isinstance(value, dict):
        raise refuse(
            ErrorCode.INVALID_TYPE,
            f"invalid type for '{path}': expected an object, got {json_type(value)}",
            path,
        )
    return Fields(value, path, known, ignored)
