"""Label and field selectors, parsed and matched the way a Kubernetes API server does.

Label selectors follow the grammar of k8s.io/apimachinery/pkg/labels (``a=b``,
``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, ``a>1``,
``a<1``), including its lexer quirks: ``in``/``notin`` are keywords only where
an operator may stand, ``x in ()`` means "x is the empty string", and keys and
values are validated like label keys and values.

Field selectors follow k8s.io/apimachinery/pkg/fields (``=``, ``==``, ``!=``,
comma-separated, ``\\,`` ``\\=`` ``\\\\`` escapes in values) with the per-kind
field label conversion functions of the real API server deciding which
fields are selectable (kubernetes pkg/apis/core/v1/conversion.go and the
registry strategies' ``ToSelectableFields``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import errors

# Operators, spelled as k8s.io/apimachinery/pkg/selection names them.
OP_IN = "in"
OP_NOT_IN = "notin"
OP_EQUALS = "="
OP_DOUBLE_EQUALS = "=="
OP_NOT_EQUALS = "!="
OP_EXISTS = "exists"
OP_DOES_NOT_EXIST = "!"
OP_GREATER_THAN = "gt"
OP_LESS_THAN = "lt"

_BINARY_OPERATORS = (OP_IN, OP_NOT_IN, OP_EQUALS, OP_DOUBLE_EQUALS, OP_NOT_EQUALS, OP_GREATER_THAN, OP_LESS_THAN)
_VALID_OPERATORS = (*_BINARY_OPERATORS, OP_EXISTS, OP_DOES_NOT_EXIST)

# -- label key / value validation (k8s.io/apimachinery/pkg/api/validate/content) -------------

_LABEL_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_NAME_RE = re.compile(f"^{_LABEL_NAME_FMT}$")
_LABEL_VALUE_FMT = f"({_LABEL_NAME_FMT})?"
_LABEL_VALUE_RE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_LABEL_NAME_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_MAX_LENGTH = 63
_DNS1123_SUBDOMAIN_MAX_LENGTH = 253


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a valid label key (empty when it is)."""
    problems: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            if len(prefix) > _DNS1123_SUBDOMAIN_MAX_LENGTH:
                problems.append(f"prefix part must be no more than {_DNS1123_SUBDOMAIN_MAX_LENGTH} bytes")
            if not _DNS1123_SUBDOMAIN_RE.match(prefix):
                problems.append(
                    "prefix part " + _regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_NAME_ERR, _LABEL_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > _LABEL_MAX_LENGTH:
        problems.append(f"name part must be no more than {_LABEL_MAX_LENGTH} bytes")
    if not _LABEL_NAME_RE.match(name):
        problems.append("name part " + _regex_error(_LABEL_NAME_ERR, _LABEL_NAME_FMT, "MyName", "my.name", "123-abc"))
    return problems


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a valid label value (empty when it is)."""
    problems: list[str] = []
    if len(value) > _LABEL_MAX_LENGTH:
        problems.append(f"must be no more than {_LABEL_MAX_LENGTH} bytes")
    if not _LABEL_VALUE_RE.match(value):
        problems.append(_regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return problems


def _go_quote(value: Any) -> str:
    """Go's ``%q`` of a string, close enough for error messages."""
    return json.dumps(value, ensure_ascii=False)


def _field_invalid(path: str, value: Any, detail: str) -> str:
    shown = _go_quote(value) if isinstance(value, str) else json.dumps(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def _aggregate(messages: list[str]) -> str:
    """How apimachinery's errors.Aggregate prints several errors."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# -- label selectors -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: ``key <operator> values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator in (OP_IN, OP_EQUALS, OP_DOUBLE_EQUALS):
            return present and labels[self.key] in self.values
        if self.operator in (OP_NOT_IN, OP_NOT_EQUALS):
            return not present or labels[self.key] not in self.values
        if self.operator == OP_EXISTS:
            return present
        if self.operator == OP_DOES_NOT_EXIST:
            return not present
        if self.operator in (OP_GREATER_THAN, OP_LESS_THAN):
            # Like the real Requirement.Matches: a label that is not an integer never matches.
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.operator == OP_GREATER_THAN else have < want
        return False

    def __str__(self) -> str:
        if self.operator == OP_EXISTS:
            return self.key
        if self.operator == OP_DOES_NOT_EXIST:
            return "!" + self.key
        if self.operator in (OP_IN, OP_NOT_IN):
            return f"{self.key} {self.operator} ({','.join(sorted(self.values))})"
        symbol = {OP_GREATER_THAN: ">", OP_LESS_THAN: "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{self.values[0] if self.values else ''}"


def make_requirement(key: str, operator: str, values: list[str] | tuple[str, ...]) -> Requirement:
    """Build a validated requirement, failing with the real ``NewRequirement`` messages."""
    problems: list[str] = []
    for detail in label_key_errors(key):
        problems.append(_field_invalid("key", key, detail))
    # Go prints an empty (nil) value list as "null".
    shown_values = list(values) or None
    if operator in (OP_IN, OP_NOT_IN):
        if not values:
            problems.append(
                _field_invalid("values", shown_values, "for 'in', 'notin' operators, values set can't be empty")
            )
    elif operator in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_NOT_EQUALS):
        if len(values) != 1:
            problems.append(
                _field_invalid("values", shown_values, "exact-match compatibility requires one single value")
            )
    elif operator in (OP_EXISTS, OP_DOES_NOT_EXIST):
        if values:
            problems.append(
                _field_invalid("values", shown_values, "values set must be empty for exists and does not exist")
            )
    elif operator in (OP_GREATER_THAN, OP_LESS_THAN):
        if len(values) != 1:
            problems.append(
                _field_invalid("values", shown_values, "for 'Gt', 'Lt' operators, exactly one value is required")
            )
        for index, value in enumerate(values):
            if not re.fullmatch(r"[+-]?[0-9]+", value):
                problems.append(
                    _field_invalid(f"values[{index}]", value, "for 'Gt', 'Lt' operators, the value must be an integer")
                )
    else:
        supported = ", ".join(_go_quote(op) for op in _VALID_OPERATORS)
        problems.append(f"operator: Unsupported value: {_go_quote(operator)}: supported values: {supported}")
    for index, value in enumerate(values):
        for detail in label_value_errors(value):
            problems.append(_field_invalid(f"values[{index}][{key}]", value, detail))
    if problems:
        raise errors.bad_request(_aggregate(problems))
    return Requirement(key=key, operator=operator, values=tuple(values))


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements.  No requirements selects everything;
    ``selects_nothing`` is the selector a nil ``metav1.LabelSelector`` becomes."""

    requirements: tuple[Requirement, ...] = ()
    selects_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.selects_nothing:
            return False
        present = labels or {}
        return all(requirement.matches(present) for requirement in self.requirements)

    @property
    def empty(self) -> bool:
        """True when the selector selects every object."""
        return not self.selects_nothing and not self.requirements

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(selects_nothing=True)

# Lexer tokens of the label selector grammar.
_T_END = "end of string"
_T_IDENT = "identifier"
_T_COMMA = ","
_T_OPEN = "("
_T_CLOSE = ")"
_T_NOT = "!"
_T_EQ = "="
_T_DOUBLE_EQ = "=="
_T_NOT_EQ = "!="
_T_GT = ">"
_T_LT = "<"
_T_IN = "in"
_T_NOT_IN = "notin"
_T_ERROR = "error"

_SPECIAL_CHARS = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_SYMBOL_TOKENS = {
    "!=": _T_NOT_EQ,
    "==": _T_DOUBLE_EQ,
    "=": _T_EQ,
    "!": _T_NOT,
    "(": _T_OPEN,
    ")": _T_CLOSE,
    ",": _T_COMMA,
    ">": _T_GT,
    "<": _T_LT,
}
_OPERATOR_BY_TOKEN = {
    _T_IN: OP_IN,
    _T_NOT_IN: OP_NOT_IN,
    _T_EQ: OP_EQUALS,
    _T_DOUBLE_EQ: OP_DOUBLE_EQUALS,
    _T_NOT_EQ: OP_NOT_EQUALS,
    _T_GT: OP_GREATER_THAN,
    _T_LT: OP_LESS_THAN,
}


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while True:
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if position >= len(text):
            tokens.append((_T_END, ""))
            return tokens
        char = text[position]
        if char in _SPECIAL_CHARS:
            # Longest operator first, as the real lexer grows its buffer while it still names a token.
            pair = text[position : position + 2]
            symbol = pair if pair in ("!=", "==") else char
            tokens.append((_SYMBOL_TOKENS[symbol], symbol))
            position += len(symbol)
            continue
        start = position
        while position < len(text) and text[position] not in _SPECIAL_CHARS and text[position] not in _WHITESPACE:
            position += 1
        word = text[start:position]
        tokens.append(({"in": _T_IN, "notin": _T_NOT_IN}.get(word, _T_IDENT), word))


class _LabelSelectorParser:
    """Recursive descent over the token list, mirroring apimachinery's labels.Parser."""

    def __init__(self, text: str) -> None:
        self._tokens = _tokenize(text)
        self._position = 0

    def _peek(self, *, values: bool) -> tuple[str, str]:
        kind, literal = self._tokens[self._position]
        # Where a value may stand, "in" and "notin" are plain words ("x in (in)").
        if values and kind in (_T_IN, _T_NOT_IN):
            kind = _T_IDENT
        return kind, literal

    def _take(self, *, values: bool) -> tuple[str, str]:
        token = self._peek(values=values)
        self._position += 1
        return token

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            kind, literal = self._peek(values=True)
            if kind in (_T_IDENT, _T_NOT):
                try:
                    requirements.append(self._requirement())
                except errors.ApiError as failure:
                    raise errors.bad_request(f"unable to parse requirement: {failure.message}") from None
                kind, literal = self._take(values=True)
                if kind == _T_END:
                    return requirements
                if kind != _T_COMMA:
                    raise errors.bad_request(f"found '{literal}', expected: ',' or 'end of string'")
                after, after_literal = self._peek(values=True)
                if after not in (_T_IDENT, _T_NOT):
                    raise errors.bad_request(f"found '{after_literal}', expected: identifier after ','")
            elif kind == _T_END:
                return requirements
            else:
                raise errors.bad_request(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        negated = False
        kind, literal = self._take(values=True)
        if kind == _T_NOT:
            negated = True
            kind, literal = self._take(values=True)
        if kind != _T_IDENT:
            raise errors.bad_request(f"found '{literal}', expected: identifier")
        key = literal
        problems = label_key_errors(key)
        if problems:
            # The parser checks the key with no field path, hence apimachinery's "<nil>".
            raise errors.bad_request(_field_invalid("<nil>", key, "; ".join(problems)))
        if negated:
            # "!a" ends the requirement whatever follows; "!a=b" then fails in parse()
            # on the "=", exactly as upstream.
            return make_requirement(key, OP_DOES_NOT_EXIST, ())
        following, _ = self._peek(values=True)
        if following in (_T_END, _T_COMMA):
            return make_requirement(key, OP_EXISTS, ())
        operator_kind, operator_literal = self._take(values=False)
        operator = _OPERATOR_BY_TOKEN.get(operator_kind)
        if operator is None:
            raise errors.bad_request(f"found '{operator_literal}', expected: {', '.join(_BINARY_OPERATORS)}")
        values = self._value_set() if operator in (OP_IN, OP_NOT_IN) else self._exact_value()
        return make_requirement(key, operator, sorted(values))

    def _value_set(self) -> set[str]:
        kind, literal = self._take(values=True)
        if kind != _T_OPEN:
            raise errors.bad_request(f"found '{literal}' expected: '('")
        kind, literal = self._peek(values=True)
        if kind == _T_CLOSE:
            self._take(values=True)
            return {""}
        if kind not in (_T_IDENT, _T_COMMA):
            raise errors.bad_request(f"found '{literal}', expected: ',', ')' or identifier")
        values = self._identifier_list()
        closing, _ = self._take(values=True)
        if closing != _T_CLOSE:
            raise errors.bad_request(f"found '{literal}', expected: ')'")
        return values

    def _identifier_list(self) -> set[str]:
        # Empty entries ("(a,,b)", "(,a)", "(a,)") stand for the empty string, as upstream.
        values: set[str] = set()
        while True:
            kind, literal = self._take(values=True)
            if kind == _T_IDENT:
                values.add(literal)
                after, after_literal = self._peek(values=True)
                if after == _T_COMMA:
                    continue
                if after == _T_CLOSE:
                    return values
                raise errors.bad_request(f"found '{after_literal}', expected: ',' or ')'")
            if kind == _T_COMMA:
                if not values:
                    values.add("")
                after, _ = self._peek(values=True)
                if after in (_T_CLOSE, _T_COMMA):
                    values.add("")
                if after == _T_CLOSE:
                    return values
                continue
            raise errors.bad_request(f"found '{literal}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        kind, _ = self._peek(values=True)
        if kind in (_T_END, _T_COMMA):
            return {""}
        kind, literal = self._take(values=True)
        if kind == _T_IDENT:
            return {literal}
        raise errors.bad_request(f"found '{literal}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a ``labelSelector`` query parameter; bad syntax raises a 400 ApiError."""
    requirements = _LabelSelectorParser(text or "").parse()
    return LabelSelector(requirements=tuple(sorted(requirements, key=lambda requirement: requirement.key)))


def label_selector_from_map(selector: Mapping[str, str] | None) -> LabelSelector:
    """A plain ``{key: value}`` map (``nodeSelector``, a Service selector); empty selects everything."""
    if not selector:
        return EVERYTHING
    requirements = [make_requirement(key, OP_EQUALS, (str(value),)) for key, value in selector.items()]
    return LabelSelector(requirements=tuple(sorted(requirements, key=lambda requirement: requirement.key)))


_EXPRESSION_OPERATORS = {"In": OP_IN, "NotIn": OP_NOT_IN, "Exists": OP_EXISTS, "DoesNotExist": OP_DOES_NOT_EXIST}


def label_selector_from_dict(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` object (``matchLabels`` + ``matchExpressions``).

    As ``LabelSelectorAsSelector``: ``None`` selects nothing, ``{}`` selects everything.
    """
    if selector is None:
        return NOTHING
    match_labels = selector.get("matchLabels") or {}
    match_expressions = selector.get("matchExpressions") or []
    if not match_labels and not match_expressions:
        return EVERYTHING
    requirements = [make_requirement(key, OP_EQUALS, (str(value),)) for key, value in match_labels.items()]
    for expression in match_expressions:
        operator = _EXPRESSION_OPERATORS.get(expression.get("operator", ""))
        if operator is None:
            raise errors.bad_request(
                f"{_go_quote(expression.get('operator', ''))} is not a valid label selector operator"
            )
        requirements.append(make_requirement(expression.get("key", ""), operator, list(expression.get("values") or [])))
    return LabelSelector(requirements=tuple(requirements))


# -- field selectors ------------------------------------------------------------------------------

FieldGetter = Callable[[dict[str, Any]], str]


def _path(*keys: str) -> FieldGetter:
    def get(obj: dict[str, Any]) -> str:
        value: Any = obj
        for key in keys:
            if not isinstance(value, dict):
                return ""
            value = value.get(key)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


def _boolean(*keys: str) -> FieldGetter:
    # Go's strconv.FormatBool of a bool field that defaults to false.
    def get(obj: dict[str, Any]) -> str:
        return "true" if _path(*keys)(obj) == "true" else "false"

    return get


def _pod_ip(obj: dict[str, Any]) -> str:
    # The registry selects on the first of status.podIPs (the primary IP).
    status = obj.get("status") or {}
    pod_ips = status.get("podIPs") or []
    if pod_ips and isinstance(pod_ips[0], dict):
        return str(pod_ips[0].get("ip") or "")
    return str(status.get("podIP") or "")


def _event_source(obj: dict[str, Any]) -> str:
    # The event registry falls back to reportingComponent when source.component is empty.
    return _path("source", "component")(obj) or _path("reportingComponent")(obj)


def _job_successful(obj: dict[str, Any]) -> str:
    return str(int((obj.get("status") or {}).get("succeeded") or 0))


def _always_empty(obj: dict[str, Any]) -> str:
    return ""


_NAME = _path("metadata", "name")
_NAMESPACE = _path("metadata", "namespace")


@dataclass(frozen=True)
class _FieldLabels:
    """The fields one kind accepts in a field selector and how the unsupported ones are refused."""

    fields: Mapping[str, FieldGetter]
    # Old spellings the conversion function renames (Pod "spec.host" is "spec.nodeName").
    aliases: Mapping[str, str]
    # Kinds with a conversion function of their own say "field label not supported: X";
    # the rest use the default conversion and its "is not a known field selector" wording.
    own_conversion: bool


_DEFAULT_FIELD_LABELS = _FieldLabels(
    fields={"metadata.name": _NAME, "metadata.namespace": _NAMESPACE}, aliases={}, own_conversion=False
)

_FIELD_LABELS_BY_KIND: dict[str, _FieldLabels] = {
    "Pod": _FieldLabels(
        fields={
            "metadata.name": _NAME,
            "metadata.namespace": _NAMESPACE,
            "spec.nodeName": _path("spec", "nodeName"),
            "spec.restartPolicy": _path("spec", "restartPolicy"),
            "spec.schedulerName": _path("spec", "schedulerName"),
            "spec.serviceAccountName": _path("spec", "serviceAccountName"),
            "spec.hostNetwork": _boolean("spec", "hostNetwork"),
            "status.phase": _path("status", "phase"),
            "status.podIP": _pod_ip,
            # Accepted by the conversion function (it also serves the downward API) but not
            # among the pod's selectable fields, so it always compares as "".
            "status.podIPs": _always_empty,
            "status.nominatedNodeName": _path("status", "nominatedNodeName"),
        },
        aliases={"spec.host": "spec.nodeName"},
        own_conversion=True,
    ),
    # Cluster-scoped kinds with their own conversion accept no metadata.namespace.
    "Node": _FieldLabels(
        fields={"metadata.name": _NAME, "spec.unschedulable": _boolean("spec", "unschedulable")},
        aliases={},
        own_conversion=True,
    ),
    "Namespace": _FieldLabels(
        fields={"metadata.name": _NAME, "status.phase": _path("status", "phase")}, aliases={}, own_conversion=True
    ),
    "Event": _FieldLabels(
        fields={
            "metadata.name": _NAME,
            "metadata.namespace": _NAMESPACE,
            "involvedObject.kind": _path("involvedObject", "kind"),
            "involvedObject.namespace": _path("involvedObject", "namespace"),
            "involvedObject.name": _path("involvedObject", "name"),
            "involvedObject.uid": _path("involvedObject", "uid"),
            "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
            "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
            "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
            "reason": _path("reason"),
            "reportingComponent": _path("reportingComponent"),
            "source": _event_source,
            "type": _path("type"),
        },
        aliases={},
        own_conversion=True,
    ),
    "Secret": _FieldLabels(
        fields={"metadata.name": _NAME, "metadata.namespace": _NAMESPACE, "type": _path("type")},
        aliases={},
        own_conversion=True,
    ),
    "Service": _FieldLabels(
        fields={
            "metadata.name": _NAME,
            "metadata.namespace": _NAMESPACE,
            "spec.clusterIP": _path("spec", "clusterIP"),
            "spec.type": _path("spec", "type"),
        },
        aliases={},
        own_conversion=True,
    ),
    "ReplicationController": _FieldLabels(
        fields={
            "metadata.name": _NAME,
            "metadata.namespace": _NAMESPACE,
            "status.replicas": _path("status", "replicas"),
        },
        aliases={},
        own_conversion=True,
    ),
    "Job": _FieldLabels(
        fields={"metadata.name": _NAME, "metadata.namespace": _NAMESPACE, "status.successful": _job_successful},
        aliases={},
        own_conversion=True,
    ),
}


def selectable_fields(kind: str) -> tuple[str, ...]:
    """The field labels a field selector on ``kind`` may use."""
    labels = _FIELD_LABELS_BY_KIND.get(kind, _DEFAULT_FIELD_LABELS)
    return (*labels.fields, *labels.aliases)


def split_field_terms(text: str) -> list[str]:
    # Commas escaped with a backslash are data, not separators.
    terms: list[str] = []
    start = 0
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    return terms


def split_field_term(term: str) -> tuple[str, str, str] | None:
    # The first operator occurrence splits; "!=" and "==" win over "=" at the same place.
    for index in range(len(term)):
        for operator in ("!=", "==", "="):
            if term.startswith(operator, index):
                return term[:index], operator, term[index + len(operator) :]
    return None


def _unescape_value(value: str) -> str:
    if not any(char in value for char in "\\,="):
        return value
    result: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise errors.bad_request(f"invalid field selector: invalid escape sequence: \\{char}")
            result.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise errors.bad_request(f"invalid field selector: unescaped character in value: {char}")
        else:
            result.append(char)
    if escaped:
        raise errors.bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(result)


@dataclass(frozen=True)
class _FieldTerm:
    field: str
    value: str
    negated: bool
    getter: FieldGetter

    def matches(self, obj: dict[str, Any]) -> bool:
        return (self.getter(obj) == self.value) != self.negated


def parse_field_selector(text: str, kind: str) -> Callable[[dict[str, Any]], bool]:
    """Parse a ``fieldSelector`` for objects of ``kind``; returns a predicate over objects.

    A field missing from an object compares as "" (``spec.nodeName=`` selects
    unscheduled pods) and booleans as "true"/"false".  Unsupported fields and
    bad syntax raise a 400 ApiError with the real server's wording.
    """
    labels = _FIELD_LABELS_BY_KIND.get(kind, _DEFAULT_FIELD_LABELS)
    terms: list[_FieldTerm] = []
    for part in sorted(split_field_terms(text or "")):
        if not part:
            continue
        split = split_field_term(part)
        if split is None:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, operator, raw_value = split
        value = _unescape_value(raw_value)
        field = labels.aliases.get(field, field)
        getter = labels.fields.get(field)
        if getter is None:
            if labels.own_conversion:
                raise errors.bad_request(f"field label not supported: {field}")
            raise errors.bad_request(
                f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            )
        terms.append(_FieldTerm(field=field, value=value, negated=operator == "!=", getter=getter))

    def predicate(obj: dict[str, Any]) -> bool:
        return all(term.matches(obj) for term in terms)

    return predicate
