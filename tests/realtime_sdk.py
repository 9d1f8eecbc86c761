"""The openai SDK as the reference of the Realtime protocol, for the tests (test-only).

* :func:`validate_server_event`: a server event (as this server serializes it)
  must validate against the SDK's ``RealtimeServerEvent`` union as the class of
  its ``type``, use no field the SDK's models do not know (they allow extras, so
  that is checked separately), and dump back to exactly the same JSON (no value
  was coerced). The session object may carry ``id`` and ``object``: it is then
  also validated against ``RealtimeSessionCreateResponse``, which has them.
* :func:`sdk_client_events`: a hypothesis strategy of client events built from
  the SDK's own pydantic models (every field the types allow, random values of
  the declared types) and serialized the way the SDK's ``send()`` does.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from hypothesis import strategies as st
from openai.types.realtime import RealtimeServerEvent
from openai.types.realtime.realtime_client_event import RealtimeClientEvent
from openai.types.realtime.realtime_session_create_response import RealtimeSessionCreateResponse
from pydantic import BaseModel, TypeAdapter, ValidationError

SERVER_EVENTS: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
CLIENT_EVENT_MODELS: tuple[type[BaseModel], ...] = typing.get_args(typing.get_args(RealtimeClientEvent)[0])


def extras(model: Any, path: str = "$") -> list[tuple[str, set[str]]]:
    """Fields a validated model holds that its class does not declare, anywhere inside."""
    found: list[tuple[str, set[str]]] = []
    if isinstance(model, BaseModel):
        if model.model_extra:
            found.append((path, set(model.model_extra)))
        for name in type(model).model_fields:
            found += extras(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, list):
        for n, value in enumerate(model):
            found += extras(value, f"{path}[{n}]")
    elif isinstance(model, dict):
        for key, value in model.items():
            found += extras(value, f"{path}.{key}")
    return found


def validate_server_event(event: dict[str, Any]) -> BaseModel:
    """The SDK's model of ``event``; AssertionError if it is not exactly the protocol's shape."""
    assert json.loads(json.dumps(event, allow_nan=False)) == event, "not plain JSON"
    model = SERVER_EVENTS.validate_python(event)
    assert isinstance(model, BaseModel)
    assert getattr(model, "type", None) == event["type"]
    unknown = extras(model)
    if "session" in event:
        assert unknown == [("$.session", {"id", "object"})], unknown
        strict = RealtimeSessionCreateResponse.model_validate(event["session"])
        assert extras(strict) == [], extras(strict)
    else:
        assert unknown == [], unknown
    assert model.model_dump(mode="json", exclude_unset=True) == event
    return model


# ---------------------------------------------------------------- client events from the SDK's types

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "AAAA", "AAE=", "item_1", "root", "auto", "none", "en", "gpt-4o-transcribe"]),
)


def _strategy(tp: Any, depth: int) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _strategy(args[0], depth)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_strategy(a, depth) for a in args))
    if origin in (list, typing.List):  # noqa: UP006
        return st.lists(_strategy(args[0], depth + 1), max_size=0 if depth > 4 else 3)
    if origin in (dict, typing.Dict):  # noqa: UP006
        return st.dictionaries(st.text(max_size=6), _strategy(args[1], depth + 1), max_size=3)
    if tp is type(None):
        return st.none()
    if tp is str:
        return _TEXT
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.one_of(st.integers(-5, 5), st.integers(0, 5000))
    if tp is float:
        return st.one_of(st.floats(0, 2), st.just(0.5), st.just(1.0))
    if tp is object:
        return json_values
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _model(tp, depth)
    raise TypeError(f"no strategy for {tp!r}")  # pragma: no cover


def _model(cls: type[BaseModel], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for name, field in cls.model_fields.items():
        key = field.alias or name
        strategy = _strategy(field.annotation, depth + 1)
        (required if field.is_required() else optional)[key] = strategy
    if depth > 6:
        optional = {}
    return st.fixed_dictionaries(required, optional=optional)


def _sdk_json(cls: type[BaseModel], data: dict[str, Any]) -> str | None:
    """The event as the SDK's ``send()`` writes a model (None: not valid for the SDK)."""
    try:
        model = cls.model_validate(data)
    except ValidationError:
        return None
    return model.to_json(use_api_names=True, exclude_unset=True)  # type: ignore[attr-defined, no-any-return]


def sdk_client_events() -> st.SearchStrategy[str]:
    """Client events the SDK's types can express, as the SDK sends them."""
    per_class = [_model(cls, 0).map(lambda d, cls=cls: _sdk_json(cls, d)) for cls in CLIENT_EVENT_MODELS]
    return st.one_of(*per_class).filter(lambda text: text is not None)  # type: ignore[return-value]
