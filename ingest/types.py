"""Field types as Spark SQL DDL strings, parsed without a JVM (so `check-config` needs no Spark).

Accepted: every primitive (`string`, `boolean`, `tinyint`/`byte`, `smallint`/`short`, `int`/`integer`,
`bigint`/`long`, `float`/`real`, `double`, `decimal(p,s)`, `date`, `timestamp`, `timestamp_ntz`, `binary`
(base64 in JSON)), `json` (any JSON value kept as its text), and nested `struct<name: type [NOT NULL], ...>`,
`array<type>` and `map<string, type>` to any depth. Names compare case-insensitively, as in Spark; a struct field
name may be quoted with backticks. Errors say where in the string the problem is and what was expected.
"""

from __future__ import annotations

import re

from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, MapType, ShortType, StringType,
                               StructField, StructType, TimestampNTZType, TimestampType)

# Metadata keys the record decoder (jvm/src/main/java/io/lakeline/spark/RecordDecoder.java) reads from a field.
JSON_TEXT = "lakeline_json"          # a `json` field: any JSON value, kept as its JSON text
JSON_NAME = "lakeline_json_name"     # the JSON key, when it differs from the column name
REQUIRED = "lakeline_required"       # a top-level `required: true`
TIME_FORMAT = "lakeline_time_format" # how timestamps in this field are written (TIME_FORMATS)
EVOLVED = "lakeline_evolved"         # added by schema evolution: a value that does not fit is a schema_violation

TIME_FORMATS = ("iso", "epoch_seconds", "epoch_millis", "epoch_micros")

PRIMITIVES: dict[str, DataType] = {
    "string": StringType(), "boolean": BooleanType(), "bool": BooleanType(),
    "tinyint": ByteType(), "byte": ByteType(), "smallint": ShortType(), "short": ShortType(),
    "int": IntegerType(), "integer": IntegerType(), "bigint": LongType(), "long": LongType(),
    "float": FloatType(), "real": FloatType(), "double": DoubleType(),
    "date": DateType(), "timestamp": TimestampType(), "timestamp_ltz": TimestampType(),
    "timestamp_ntz": TimestampNTZType(), "binary": BinaryType(),
}
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")
_MAX_DEPTH = 32


class TypeSyntaxError(ValueError):
    """A type string that does not parse; the message names the position and what was expected."""


class _Parser:
    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def fail(self, expected: str) -> TypeSyntaxError:
        got = self.text[self.pos:self.pos + 12].strip() or "the end"
        return TypeSyntaxError(f"type {self.text!r}: expected {expected} at position {self.pos}, found {got!r}")

    def peek(self) -> str | None:
        match = _TOKEN.match(self.text, self.pos)
        return next((g for g in match.groups() if g is not None), None) if match else None

    def take(self) -> str:
        match = _TOKEN.match(self.text, self.pos)
        if not match:
            raise self.fail("a type name, a name or one of < > ( ) , :")
        self.pos = match.end()
        return next(g for g in match.groups() if g is not None)

    def expect(self, token: str) -> None:
        if (self.peek() or "").lower() != token:
            raise self.fail(f"{token!r}")
        self.take()

    def done(self) -> None:
        if self.text[self.pos:].strip():
            raise self.fail("the end of the type")

    def data_type(self, depth: int = 0) -> DataType:
        if depth > _MAX_DEPTH:
            raise self.fail(f"at most {_MAX_DEPTH} levels of nesting")
        start = self.pos
        word = self.take().lower()
        if word == "json":
            raise TypeSyntaxError(f"type {self.text!r}: `json` is a field type (a struct field or a top-level field), "
                                  "not an array element or map value; use array<string> with JSON text instead")
        if word in PRIMITIVES:
            return PRIMITIVES[word]
        if word in ("decimal", "dec", "numeric"):
            return self.decimal()
        if word == "array":
            self.expect("<")
            element = self.data_type(depth + 1)
            self.expect(">")
            return ArrayType(element, True)
        if word == "map":
            self.expect("<")
            key = self.data_type(depth + 1)
            if not isinstance(key, StringType):
                raise TypeSyntaxError(f"type {self.text!r}: map keys must be string (JSON object keys are)")
            self.expect(",")
            value = self.data_type(depth + 1)
            self.expect(">")
            return MapType(key, value, True)
        if word == "struct":
            return self.struct(depth)
        if word == "variant":
            raise TypeSyntaxError(f"type {self.text!r}: variant is not supported (conf/README.md, 'Types': "
                                  "pyiceberg and the analyst read cannot read it at the pinned versions); use `json`")
        self.pos = start
        raise self.fail("a type (string, int, long, double, decimal(p,s), timestamp, struct<...>, array<...>, "
                        "map<string,...>, ...)")

    def decimal(self) -> DecimalType:
        if self.peek() != "(":
            return DecimalType(10, 0)
        self.take()
        precision = self.number("a precision")
        scale = 0
        if self.peek() == ",":
            self.take()
            scale = self.number("a scale")
        self.expect(")")
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise TypeSyntaxError(f"type {self.text!r}: decimal({precision},{scale}) needs 1 <= precision <= 38 and "
                                  "0 <= scale <= precision")
        return DecimalType(precision, scale)

    def number(self, what: str) -> int:
        token = self.peek()
        if token is None or not token.isdigit():
            raise self.fail(what)
        return int(self.take())

    def struct(self, depth: int) -> StructType:
        self.expect("<")
        fields: list[StructField] = []
        while True:
            if self.peek() == ">" and not fields:
                raise self.fail("at least one field")
            token = self.peek()
            if token is None or token in "<>(),:":
                raise self.fail("a field name")
            name = self.take()
            name = name[1:-1].replace("``", "`") if name.startswith("`") else name
            if self.peek() == ":":
                self.take()
            metadata = {}
            if (self.peek() or "").lower() == "json":
                self.take()
                field_type, metadata = StringType(), {JSON_TEXT: True}
            else:
                field_type = self.data_type(depth + 1)
            nullable = True
            if (self.peek() or "").lower() == "not":
                self.take()
                self.expect("null")
                nullable = False
            if any(f.name.lower() == name.lower() for f in fields):
                raise TypeSyntaxError(f"type {self.text!r}: struct field {name!r} is declared twice")
            fields.append(StructField(name, field_type, nullable, metadata))
            separator = self.take() if self.peek() in (",", ">") else None
            if separator == ">":
                return StructType(fields)
            if separator != ",":
                raise self.fail("',' or '>' after a struct field")


def parse_type(text: str) -> tuple[DataType, dict]:
    """A field's DDL type string -> (Spark type, field metadata). `json` gives a string with the JSON_TEXT mark."""
    if not isinstance(text, str) or not text.strip():
        raise TypeSyntaxError("type must be a non-empty string such as 'string' or 'struct<id:string>'")
    parser = _Parser(text)
    if (parser.peek() or "").lower() == "json":
        parser.take()
        parser.done()
        return StringType(), {JSON_TEXT: True}
    data_type = parser.data_type()
    parser.done()
    return data_type, {}


def contains(data_type: DataType, kinds: tuple[type, ...]) -> bool:
    """Whether `data_type` is, or nests, one of `kinds`."""
    if isinstance(data_type, kinds):
        return True
    if isinstance(data_type, StructType):
        return any(contains(f.dataType, kinds) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return contains(data_type.elementType, kinds)
    if isinstance(data_type, MapType):
        return contains(data_type.valueType, kinds)
    return False


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def to_ddl(data_type: DataType) -> str:
    """A type as DDL Spark's CREATE TABLE takes back: struct field names quoted, NOT NULL kept."""
    if isinstance(data_type, StructType):
        return "struct<" + ",".join(f"{quote(f.name)}:{to_ddl(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
                                    for f in data_type.fields) + ">"
    if isinstance(data_type, ArrayType):
        return f"array<{to_ddl(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"map<{to_ddl(data_type.keyType)},{to_ddl(data_type.valueType)}>"
    return data_type.simpleString()


def rebuild(data_type: DataType, leaf=lambda t: t, nullable: bool | None = None) -> DataType:
    """The same shape with `leaf` applied to every non-nested type, field metadata dropped, and every nested
    nullability set to `nullable` (None: kept)."""
    def null(kept: bool) -> bool:
        return kept if nullable is None else nullable

    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, rebuild(f.dataType, leaf, nullable), null(f.nullable))
                           for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(rebuild(data_type.elementType, leaf, nullable), null(data_type.containsNull))
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, rebuild(data_type.valueType, leaf, nullable),
                       null(data_type.valueContainsNull))
    return leaf(data_type)


def table_type(data_type: DataType) -> DataType:
    """What the table stores for a declared type: the same shape, every nested field nullable and Lakeline's field
    marks removed. NOT NULL is the decoder's to enforce (a record breaking it is a dead letter), the same on both
    formats: Delta refuses NOT NULL inside arrays and maps, and a nullable column never blocks a later evolution."""
    return rebuild(data_type, nullable=True)
