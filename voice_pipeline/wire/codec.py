"""The JSON of ``/ws``: one encoding for every message, one decoding, the version."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

PROTOCOL_VERSION = 1

Json = dict[str, Any]


def dumps(msg: Mapping[str, object]) -> str:
    """Compact JSON, UTF-8 as is (what the server has always sent)."""
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False)


def loads(text: str) -> object:
    """One JSON value; ValueError for anything else (nesting deeper than json goes included)."""
    try:
        return json.loads(text)
    except RecursionError:  # "[[[[..."
        raise ValueError("JSON nested too deep") from None


class Message:
    """Base of every message: its wire ``TYPE`` and ``serialize()`` (JSON text of ``to_json()``)."""

    __slots__ = ()
    TYPE: ClassVar[str]

    def to_json(self) -> Json:
        return {"type": self.TYPE}

    def serialize(self) -> str:
        return dumps(self.to_json())
