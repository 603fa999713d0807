"""CustomResourceDefinitions: served kinds, and the structural-schema treatment of their objects.

What a real API server does with a custom resource on create and update, in
its order (k8s.io/apiextensions-apiserver, ``unstructuredSchemaCoercer`` then the
codec's defaulter, then the strategy's validation):

1. prune: fields the structural schema does not declare are dropped silently
   (``pkg/apiserver/schema/pruning``), unknown ``metadata`` fields too (metadata
   is decoded as an ObjectMeta), and ``null`` values of non-nullable fields
   without a default are removed (``defaulting/prunenulls.go``);
2. default: ``default`` values are filled in for absent (or ``null``) properties
   of objects that are present (``defaulting/algorithm.go``); an absent parent
   is not created unless it has a default of its own;
3. validate against the OpenAPI v3 schema (kube-openapi's validator, errors
   converted as ``pkg/apiserver/validation``), plus list-type set/map uniqueness.

Not done here: CEL rules (``x-kubernetes-validations``), ``format`` checks,
validation ratcheting of unchanged fields on update, and conversion between
versions (every version is served with its own schema, as stored).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import yaml

from . import errors
from .registry import PrinterColumn, ResourceType
from .store import Admission, Obj

Schema = dict[str, Any]

# ObjectMeta's JSON fields (k8s.io/apimachinery/pkg/apis/meta/v1 types.go); anything else under
# a custom resource's metadata is dropped, because the server decodes it as an ObjectMeta.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_OWNER_REFERENCE_FIELDS = frozenset({"apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"})
_RESOURCE_META_FIELDS = ("apiVersion", "kind", "metadata")


# -- CRD -> ResourceType ------------------------------------------------------------------------


def crds_from_yaml(text: str) -> list[dict[str, Any]]:
    """The CustomResourceDefinition documents of a (multi-document) YAML text."""
    # libyaml's loader when PyYAML has it: the GPU Operator CRD alone is 150 kB of YAML.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [
        document
        for document in yaml.load_all(text, Loader=loader)
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition"
    ]


def _printer_columns(version: dict[str, Any], spec: dict[str, Any]) -> tuple[PrinterColumn, ...]:
    # apiextensions.k8s.io/v1beta1 kept columns at spec level with "JSONPath"; v1 per version.
    raw_columns = version.get("additionalPrinterColumns") or spec.get("additionalPrinterColumns") or []
    return tuple(
        PrinterColumn(
            name=column["name"],
            json_path=column.get("jsonPath") or column.get("JSONPath") or "",
            type=column.get("type", "string"),
            description=column.get("description", ""),
            priority=int(column.get("priority", 0)),
            format=column.get("format", ""),
        )
        for column in raw_columns
    )


def _version_schema(version: dict[str, Any], spec: dict[str, Any]) -> Schema | None:
    holder = version.get("schema") or spec.get("validation") or {}
    schema = holder.get("openAPIV3Schema")
    return copy.deepcopy(schema) if isinstance(schema, dict) else None


def resource_types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of an ``apiextensions.k8s.io/v1`` CRD, storage version first."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    served = [version for version in spec.get("versions") or [] if version.get("served", True)]
    served.sort(key=lambda version: not version.get("storage", False))  # stable: storage version first
    resource_types = []
    for version in served:
        subresources = version.get("subresources") or spec.get("subresources") or {}
        resource_types.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                kind=names["kind"],
                plural=names["plural"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=frozenset(name for name in ("status", "scale") if name in subresources),
                printer_columns=_printer_columns(version, spec),
                schema=_version_schema(version, spec),
            )
        )
    return resource_types


# -- schema navigation ----------------------------------------------------------------------------


def _properties(schema: Schema | None) -> dict[str, Schema]:
    return (schema or {}).get("properties") or {}


def _additional(schema: Schema | None) -> Schema | None:
    """The schema of map values not named in ``properties``.

    ``additionalProperties: true`` (as old non-structural CRDs have) means values
    of any shape, which here is an empty schema that preserves unknown fields.
    """
    additional = (schema or {}).get("additionalProperties")
    if additional is True:
        return {"x-kubernetes-preserve-unknown-fields": True}
    return additional if isinstance(additional, dict) else None


def _has_additional(schema: Schema | None) -> bool:
    additional = (schema or {}).get("additionalProperties")
    return additional is True or isinstance(additional, dict)


def _field_schema(schema: Schema | None, key: str) -> Schema | None:
    properties = _properties(schema)
    if key in properties:
        return properties[key]
    return _additional(schema)


def _key_path(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


# -- defaulting -----------------------------------------------------------------------------------


def _non_nullable_null(value: Any, schema: Schema | None) -> bool:
    return value is None and schema is not None and not schema.get("nullable", False)


def apply_defaults(obj: dict, schema: dict) -> None:
    """Fill in ``default`` values of the structural schema, in place, as the server does on create/update.

    Defaults go into objects that exist: a property that is absent (or ``null`` and
    not nullable) gets its default, then defaulting recurses into the value, so a
    defaulted parent receives its children's defaults too.  An absent parent
    without a default of its own stays absent.
    """
    _default(obj, schema)


def _default(value: Any, schema: Schema | None) -> None:
    if schema is None:
        return
    if isinstance(value, dict):
        for key, property_schema in _properties(schema).items():
            if "default" not in property_schema:
                continue
            if key not in value or _non_nullable_null(value[key], property_schema):
                value[key] = copy.deepcopy(property_schema["default"])
        additional = _additional(schema)
        for key in list(value):
            if key in _properties(schema):
                _default(value[key], _properties(schema)[key])
            elif additional is not None:
                if _non_nullable_null(value[key], additional) and "default" in additional:
                    value[key] = copy.deepcopy(additional["default"])
                _default(value[key], additional)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return
        for index, item in enumerate(value):
            if _non_nullable_null(item, items) and "default" in items:
                value[index] = copy.deepcopy(items["default"])
            _default(value[index], items)


# -- pruning --------------------------------------------------------------------------------------


def prune(obj: dict, schema: dict) -> list[str]:
    """Drop, in place, every field the structural schema does not declare; return their paths, sorted.

    Honours ``x-kubernetes-preserve-unknown-fields`` (unknown fields stay, known ones
    are still pruned inside), ``additionalProperties`` (map values are pruned by that
    schema) and ``x-kubernetes-embedded-resource`` (``apiVersion``, ``kind`` and
    ``metadata`` stay).  The object root is an embedded resource; its ``metadata``
    keeps only ObjectMeta fields, as the real server decodes it into an ObjectMeta.
    Also removes ``null`` values of non-nullable fields that have no default
    (not reported: the server drops those silently as well).
    """
    dropped: list[str] = []
    root_schema = {**schema, "x-kubernetes-embedded-resource": True}
    _prune(obj, root_schema, "", dropped)
    _coerce_object_meta(obj, root_schema, "", dropped)
    _prune_nulls(obj, schema)
    return sorted(dropped)


def _prune(value: Any, schema: Schema | None, path: str, dropped: list[str]) -> None:
    if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
        _prune_known_only(value, schema, path, dropped)
        return
    if isinstance(value, dict):
        if schema is None:
            dropped.extend(_key_path(path, key) for key in value)
            value.clear()
            return
        embedded = schema.get("x-kubernetes-embedded-resource", False)
        properties = _properties(schema)
        for key in list(value):
            if embedded and key in _RESOURCE_META_FIELDS:
                continue
            if key in properties:
                _prune(value[key], properties[key], _key_path(path, key), dropped)
            elif _has_additional(schema):
                _prune(value[key], _additional(schema), _key_path(path, key), dropped)
            else:
                dropped.append(_key_path(path, key))
                del value[key]
    elif isinstance(value, list):
        items = schema.get("items") if schema is not None else None
        for index, item in enumerate(value):
            _prune(item, items if isinstance(items, dict) else None, f"{path}[{index}]", dropped)


def _prune_known_only(value: Any, schema: Schema, path: str, dropped: list[str]) -> None:
    """Under x-kubernetes-preserve-unknown-fields, unknown fields stay but declared ones are pruned."""
    if isinstance(value, dict):
        embedded = schema.get("x-kubernetes-embedded-resource", False)
        properties = _properties(schema)
        for key in list(value):
            if embedded and key in _RESOURCE_META_FIELDS:
                continue
            if key in properties:
                _prune(value[key], properties[key], _key_path(path, key), dropped)
            elif _has_additional(schema):
                _prune(value[key], _additional(schema), _key_path(path, key), dropped)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                _prune_known_only(item, items, f"{path}[{index}]", dropped)


def _coerce_object_meta(value: Any, schema: Schema | None, path: str, dropped: list[str]) -> None:
    """Keep only ObjectMeta fields under the metadata of the root and of embedded resources."""
    if schema is None:
        return
    if isinstance(value, dict):
        if schema.get("x-kubernetes-embedded-resource") and isinstance(value.get("metadata"), dict):
            meta_path = _key_path(path, "metadata")
            meta = value["metadata"]
            for key in list(meta):
                if key not in OBJECT_META_FIELDS:
                    dropped.append(_key_path(meta_path, key))
                    del meta[key]
            for index, owner in enumerate(meta.get("ownerReferences") or []):
                if isinstance(owner, dict):
                    for key in [key for key in owner if key not in _OWNER_REFERENCE_FIELDS]:
                        dropped.append(f"{meta_path}.ownerReferences[{index}].{key}")
                        del owner[key]
        for key, item in value.items():
            if key == "metadata" and schema.get("x-kubernetes-embedded-resource"):
                continue
            _coerce_object_meta(item, _field_schema(schema, key), _key_path(path, key), dropped)
    elif isinstance(value, list):
        items = schema.get("items")
        for index, item in enumerate(value):
            _coerce_object_meta(item, items if isinstance(items, dict) else None, f"{path}[{index}]", dropped)


def _prune_nulls(value: Any, schema: Schema | None) -> None:
    if isinstance(value, dict):
        for key in list(value):
            field_schema = _field_schema(schema, key)
            if _non_nullable_null(value[key], field_schema) and "default" not in (field_schema or {}):
                del value[key]
            else:
                _prune_nulls(value[key], field_schema)
    elif isinstance(value, list):
        items = (schema or {}).get("items")
        for item in value:
            _prune_nulls(item, items if isinstance(items, dict) else None)


# -- validation -----------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_matches(value: Any, wanted: str) -> bool:
    actual = _json_type(value)
    if wanted == actual:
        return True
    if wanted == "number":
        return actual == "integer"
    if wanted == "integer":
        # A float that is a whole number is an integer to the real validator (1.0 is fine).
        return actual == "number" and math.isfinite(value) and float(value).is_integer()
    return False


def _shown(value: Any) -> str:
    """A bad value as field.Error prints it (Go %q for strings, %v for numbers, JSON otherwise)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"))


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _cause(reason: str, path: str, body: str) -> dict[str, str]:
    return {"reason": reason, "message": body, "field": path}


def _invalid(path: str, value: Any, detail: str) -> dict[str, str]:
    return _cause("FieldValueInvalid", path, f"Invalid value: {_shown(value)}: {detail}")


def _allowed_types(schema: Schema) -> list[str]:
    if schema.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    declared = schema.get("type")
    if isinstance(declared, list):
        return [str(item) for item in declared]
    return [declared] if declared else []


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: 1 equals 1.0, but true is not 1 (Python's == says it is)."""
    left_type, right_type = _json_type(left), _json_type(right)
    if {left_type, right_type} <= {"integer", "number"}:
        return left == right
    if left_type != right_type:
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_json_equal(left[key], right[key]) for key in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def _enum_matches(value: Any, allowed: list[Any]) -> bool:
    return any(_json_equal(value, option) for option in allowed)


def _check_node(value: Any, schema: Schema, path: str, causes: list[dict[str, str]]) -> None:
    """The checks of one schema node (kube-openapi's validators), then recursion into children."""
    types = _allowed_types(schema)
    type_ok = True
    if value is None:
        if types and "null" not in types and not schema.get("nullable", False):
            type_ok = False
            causes.append(
                _cause(
                    "FieldValueTypeInvalid",
                    path,
                    f'Invalid value: "null": {path} in body must be of type {",".join(types)}: "null"',
                )
            )
    elif types and not any(_type_matches(value, wanted) for wanted in types):
        type_ok = False
        actual = _json_type(value)
        causes.append(
            _cause(
                "FieldValueTypeInvalid",
                path,
                f'Invalid value: "{actual}": {path} in body must be of type {",".join(types)}: "{actual}"',
            )
        )
    if "enum" in schema and not _enum_matches(value, schema["enum"]):
        supported = ", ".join(
            json.dumps(option if isinstance(option, str) else json.dumps(option), ensure_ascii=False)
            for option in schema["enum"]
        )
        causes.append(
            _cause("FieldValueNotSupported", path, f"Unsupported value: {_shown(value)}: supported values: {supported}")
        )
    if value is None or not type_ok:
        return
    if isinstance(value, str):
        _check_string(value, schema, path, causes)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, causes)
    elif isinstance(value, list):
        _check_array(value, schema, path, causes)
    elif isinstance(value, dict):
        _check_object(value, schema, path, causes)
    _check_combinators(value, schema, path, causes)


def _check_string(value: str, schema: Schema, path: str, causes: list[dict[str, str]]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        maximum = int(schema["maxLength"])
        unit = "byte" if maximum == 1 else "bytes"
        causes.append(_cause("FieldValueTooLong", path, f"Too long: may not be more than {maximum} {unit}"))
    if "minLength" in schema and len(value) < schema["minLength"]:
        causes.append(_invalid(path, value, f"{path} in body should be at least {int(schema['minLength'])} chars long"))
    pattern = schema.get("pattern")
    if pattern is not None:
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            matched = True  # a pattern Python cannot compile is not the object's fault
        if not matched:
            causes.append(_invalid(path, value, f"{path} in body should match '{pattern}'"))


def _check_number(value: float, schema: Schema, path: str, causes: list[dict[str, str]]) -> None:
    if "minimum" in schema:
        minimum = schema["minimum"]
        exclusive = bool(schema.get("exclusiveMinimum"))
        if value < minimum or (exclusive and value == minimum):
            relation = "greater than" if exclusive else "greater than or equal to"
            causes.append(_invalid(path, value, f"{path} in body should be {relation} {_number(minimum)}"))
    if "maximum" in schema:
        maximum = schema["maximum"]
        exclusive = bool(schema.get("exclusiveMaximum"))
        if value > maximum or (exclusive and value == maximum):
            relation = "less than" if exclusive else "less than or equal to"
            causes.append(_invalid(path, value, f"{path} in body should be {relation} {_number(maximum)}"))
    factor = schema.get("multipleOf")
    if factor and not float(value / factor).is_integer():
        causes.append(_invalid(path, value, f"{path} in body should be a multiple of {_number(factor)}"))


def _check_array(value: list[Any], schema: Schema, path: str, causes: list[dict[str, str]]) -> None:
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _check_node(item, items, f"{path}[{index}]", causes)
    if "minItems" in schema and len(value) < schema["minItems"]:
        causes.append(_invalid(path, len(value), f"{path} in body should have at least {schema['minItems']} items"))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        maximum = int(schema["maxItems"])
        unit = "item" if maximum == 1 else "items"
        causes.append(_cause("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {maximum} {unit}"))
    _check_list_type(value, schema, path, causes)


def _check_list_type(value: list[Any], schema: Schema, path: str, causes: list[dict[str, str]]) -> None:
    """x-kubernetes-list-type set/map: no duplicates (apiextensions schema/listtype)."""
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        seen: set[str] = set()
        for index, item in enumerate(value):
            identity = json.dumps(item, sort_keys=True)
            if identity in seen:
                causes.append(_cause("FieldValueDuplicate", f"{path}[{index}]", f"Duplicate value: {_shown(item)}"))
            seen.add(identity)
    elif list_type == "map":
        keys = list(schema.get("x-kubernetes-list-map-keys") or [])
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        seen_keys: set[str] = set()
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            identity_map = {
                key: item.get(key, _properties(items).get(key, {}).get("default")) for key in keys if key in item
            }
            identity = json.dumps(identity_map, sort_keys=True)
            if identity in seen_keys:
                causes.append(
                    _cause("FieldValueDuplicate", f"{path}[{index}]", f"Duplicate value: {_shown(identity_map)}")
                )
            seen_keys.add(identity)


def _check_object(value: dict[str, Any], schema: Schema, path: str, causes: list[dict[str, str]]) -> None:
    properties = _properties(schema)
    for required in schema.get("required") or []:
        if required not in value:
            causes.append(_cause("FieldValueRequired", _key_path(path, required), "Required value"))
    additional = _additional(schema)
    for key, item in value.items():
        if key in properties:
            _check_node(item, properties[key], _key_path(path, key), causes)
        elif additional is not None:
            _check_node(item, additional, _key_path(path, key), causes)
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        causes.append(
            _invalid(path, len(value), f"{path} in body should have at least {schema['minProperties']} properties")
        )
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        maximum = int(schema["maxProperties"])
        unit = "item" if maximum == 1 else "items"
        causes.append(_cause("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {maximum} {unit}"))


def _valid_against(value: Any, schema: Schema, path: str) -> bool:
    found: list[dict[str, str]] = []
    _check_node(value, schema, path, found)
    return not found


def _check_combinators(value: Any, schema: Schema, path: str, causes: list[dict[str, str]]) -> None:
    """anyOf / oneOf / allOf / not, as structural schemas use them (value validation only)."""
    any_of = schema.get("anyOf")
    if any_of and not any(_valid_against(value, branch, path) for branch in any_of):
        causes.append(_invalid(path, value, f"{path} in body must validate at least one schema (anyOf)"))
    one_of = schema.get("oneOf")
    if one_of and sum(_valid_against(value, branch, path) for branch in one_of) != 1:
        causes.append(_invalid(path, value, f"{path} in body must validate one and only one schema (oneOf)"))
    for branch in schema.get("allOf") or []:
        _check_node(value, branch, path, causes)
    negated = schema.get("not")
    if isinstance(negated, dict) and _valid_against(value, negated, path):
        causes.append(_invalid(path, value, f"{path} in body must not validate the schema (not)"))


def validate(obj: dict, schema: dict) -> list[dict]:
    """Check ``obj`` against the schema; return Status causes (``reason``, ``field``, ``message``).

    Messages follow the real server: ``Unsupported value: "x": supported values:
    "a", "b"``, ``Required value``, ``Invalid value: "boolean": spec.x in body must
    be of type integer,string: "boolean"``.  CEL rules are not evaluated.
    """
    causes: list[dict[str, str]] = []
    for key in ("apiVersion", "kind"):
        if key in obj and not isinstance(obj[key], str):
            causes.append(_invalid(key, obj[key], "must be a string"))
    _check_node(obj, schema, "", causes)
    return causes


# -- admission ------------------------------------------------------------------------------------


def admit_custom_resource(obj: Obj, schema: Schema) -> tuple[list[str], list[dict[str, str]]]:
    """Prune, default and validate ``obj`` in place; returns (pruned paths, causes)."""
    # The real server prunes while decoding the request and defaults afterwards; since
    # defaults must themselves survive pruning, the order only matters for odd schemas.
    pruned = prune(obj, schema)
    apply_defaults(obj, schema)
    return pruned, validate(obj, schema)


def make_crd_admission() -> Admission:
    """A store admission hook for every ResourceType with a ``schema``: prune, default, validate.

    Causes make the write fail with 422 Invalid.  On a status update the store has
    already put back the stored spec; the whole object is checked either way.
    """

    def admit(operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
        if rtype.schema is None:
            return
        _, causes = admit_custom_resource(obj, rtype.schema)
        if causes:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise errors.invalid(rtype.kind, name, causes, rtype.group)

    return admit


def walk_schema(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every (dotted path, node) of a schema; list items appear as ``path[]``, map values as ``path.*``."""
    yield path, schema
    for key, child in _properties(schema).items():
        yield from walk_schema(child, _key_path(path, key))
    items = schema.get("items")
    if isinstance(items, dict):
        yield from walk_schema(items, f"{path}[]")
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        yield from walk_schema(additional, _key_path(path, "*"))
