"""Our message declarations against Kafka's own JSON definitions, field by field.

Skipped where the definitions are not checked out next to the repository (`../shared/
kafka-message-schemas`, or the folder `RAYKAFKA_KAFKA_SCHEMAS` names): the skip's reason says
that the protocol was then not checked, and where to put Kafka's JSON files so that it is.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from raykafka.wire import messages
from raykafka.wire.protocol import PRIMITIVES, Field, Schema

KAFKA_SCHEMAS = Path(os.environ.get("RAYKAFKA_KAFKA_SCHEMAS")
                     or Path(__file__).resolve().parents[2].parent / "shared" / "kafka-message-schemas")

pytestmark = pytest.mark.skipif(not KAFKA_SCHEMAS.is_dir(), reason=(
    f"our message declarations were NOT checked against Kafka's: no definitions at {KAFKA_SCHEMAS} (copy "
    "Kafka's clients/src/main/resources/common/message/*.json there, or set RAYKAFKA_KAFKA_SCHEMAS)"))

DECLARED: list[tuple[str, Schema, int | None]] = [
    (schema.name, schema, api.key) for api in messages.APIS.values() for schema in (api.request, api.response)
]
DECLARED += [
    ("ConsumerProtocolSubscription", messages.CONSUMER_PROTOCOL_SUBSCRIPTION, None),
    ("ConsumerProtocolAssignment", messages.CONSUMER_PROTOCOL_ASSIGNMENT, None),
]


def strip_comments(text: str) -> str:
    """Kafka's JSON with its // comments removed (outside of strings only)."""
    out: list[str] = []
    i, in_string = 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(text[i:i + 2] if c == "\\" else c)
            i += 2 if c == "\\" else 1
            in_string = c != '"'
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def load(name: str) -> dict[str, Any]:
    return json.loads(strip_comments((KAFKA_SCHEMAS / f"{name}.json").read_text()))


def snake(name: str) -> str:
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)  # "TopicIDs" style acronyms
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def kafka_default(field: dict[str, Any]) -> Any:
    if "default" not in field:
        return ...
    value = field["default"]
    if not isinstance(value, str):
        return value
    if value == "null":
        return None
    if field["type"] == "bool":
        return {"true": True, "false": False}[value]
    if field["type"] == "string":
        return value
    return int(value, 0)


def check_fields(path: str, ours: tuple[Field, ...], theirs: list[dict[str, Any]],
                 common: dict[str, list[dict[str, Any]]]) -> None:
    assert [f.name for f in ours] == [snake(f["name"]) for f in theirs], path
    for mine, kafka in zip(ours, theirs, strict=True):
        where = f"{path}.{mine.name}"
        kafka_type = kafka["type"]
        struct_name = kafka_type[2:] if kafka_type.startswith("[]") else kafka_type
        if struct_name in PRIMITIVES:
            assert mine.type == kafka_type, where
        else:
            assert mine.type == ("[]" if kafka_type.startswith("[]") else "{}"), where
        assert mine.versions.text == kafka["versions"], where
        assert mine.nullable.text == kafka.get("nullableVersions", "none"), where
        assert mine.tag == kafka.get("tag"), where
        assert mine.tagged.text == kafka.get("taggedVersions", "none"), where
        assert mine.default == kafka_default(kafka) and type(mine.default) is type(kafka_default(kafka)), where
        if struct_name not in PRIMITIVES:
            check_fields(where, mine.fields, kafka.get("fields") or common[struct_name], common)


@pytest.mark.parametrize(("name", "schema", "key"), DECLARED, ids=[d[0] for d in DECLARED])
def test_matches_kafka(name: str, schema: Schema, key: int | None) -> None:
    kafka = load(name)
    assert schema.name == kafka["name"]
    assert kafka.get("apiKey") == key
    assert schema.versions.text == kafka["validVersions"]
    assert schema.flexible.text == kafka["flexibleVersions"]
    common = {c["name"]: c["fields"] for c in kafka.get("commonStructs", [])}
    check_fields(name, schema.fields, kafka["fields"], common)


def test_api_names_match_kafka() -> None:
    for api in messages.APIS.values():
        assert api.request.name == f"{api.name}Request"
        assert api.response.name == f"{api.name}Response"
        assert load(api.request.name)["type"] == "request"
        assert load(api.response.name)["type"] == "response"
