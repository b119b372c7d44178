"""Which AWS API calls the code makes, found by reading it (AST), so that a new boto3
call without a matching IAM grant fails a test instead of a production request."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from botocore import xform_name
from botocore.session import get_session

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("dynamodb", "sns", "secretsmanager", "sqs")
# Receivers that hold a boto3 client: `self._client`, `self.dynamodb`, `sns`, `self._sns()`.
_CLIENT_NAME = re.compile(r"client|dynamodb|ddb|sns|sqs|secrets", re.IGNORECASE)


@dataclass(frozen=True)
class ApiCall:
    """One boto3 client call site."""

    module: str  # path relative to the repository, e.g. chalicelib/storage/dynamodb/counters.py
    function: str  # qualified name of the enclosing function, e.g. CounterStore.get
    service: str  # dynamodb | sns | secretsmanager | sqs
    operation: str  # the API operation, also the IAM action name: UpdateItem
    line: int
    indexed: bool = False  # the call names a secondary index (`IndexName=`)

    @property
    def action(self) -> str:
        """The IAM action this call needs."""
        return f"{self.service}:{self.operation}"


@cache
def operations(service: str) -> dict[str, str]:
    """boto3 method name -> API operation name, for one service."""
    model = get_session().get_service_model(service)
    return {xform_name(name): name for name in model.operation_names}


def _terminal_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _terminal_name(node.func)
    return ""


def _service_for(method: str, receiver: str) -> str | None:
    matches = [service for service in SERVICES if method in operations(service)]
    if len(matches) > 1:
        matches = ["sns" if "sns" in receiver.lower() else "dynamodb"]
    return matches[0] if matches else None


class _Visitor(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module
        self.scope: list[str] = []
        self.calls: list[ApiCall] = []

    def _visit_scope(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = _visit_scope
    visit_FunctionDef = _visit_scope
    visit_AsyncFunctionDef = _visit_scope

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            receiver = _terminal_name(func.value)
            method = func.attr
            # `client.get_paginator("query")` pages over the `query` operation.
            if method == "get_paginator" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    method = first.value
            service = _service_for(method, receiver) if _CLIENT_NAME.search(receiver) else None
            if service is not None:
                self.calls.append(
                    ApiCall(
                        module=self.module,
                        function=".".join(self.scope) or "<module>",
                        service=service,
                        operation=operations(service)[method],
                        line=node.lineno,
                        indexed=any(k.arg == "IndexName" for k in node.keywords),
                    )
                )
        self.generic_visit(node)


def source_files() -> list[Path]:
    """The code packaged into the Lambda: app.py and everything under chalicelib/."""
    return [ROOT / "app.py", *sorted((ROOT / "chalicelib").rglob("*.py"))]


def relative(path: Path) -> str:
    """A path relative to the repository, with forward slashes."""
    return path.relative_to(ROOT).as_posix()


def api_calls(files: list[Path] | None = None) -> Iterator[ApiCall]:
    """Every boto3 DynamoDB and SNS client call in `files` (default: the packaged code)."""
    for path in files if files is not None else source_files():
        visitor = _Visitor(relative(path))
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        yield from visitor.calls


def attribute_calls(path: Path) -> Iterator[tuple[str, str, int]]:
    """(receiver source, method, line) of every `receiver.method(...)` call in a file."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield ast.unparse(node.func.value), node.func.attr, node.lineno


def _decorator_name(node: ast.expr) -> str:
    """`app.route` for `@app.route(...)`, `handled` for `@handled`."""
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _called_names(node: ast.AST) -> set[str]:
    """The plain names and `receiver.method` strings a function calls."""
    names: set[str] = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            names.add(func.id if isinstance(func, ast.Name) else ast.unparse(func))
    return names


def entry_point_files() -> list[Path]:
    """The modules that define the Lambda entry points: app.py and chalicelib/api/."""
    return [ROOT / "app.py", *sorted((ROOT / "chalicelib" / "api").glob("*.py"))]


def lambda_entry_paths(paths: list[Path] | None = None) -> dict[str, set[str]]:
    """Chalice's function kind (`authorizer`, `route`, `on_sqs_message`) -> every call its
    entry points make in the entry modules (app.py and chalicelib/api/, which import each
    other's helpers by name), following calls to those modules' own functions."""
    functions: dict[str, ast.FunctionDef] = {}
    for path in paths or entry_point_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                # One name, one function: the scan follows calls by name.
                assert node.name not in functions, f"{relative(path)}: second {node.name}"
                functions[node.name] = node
    reached: dict[str, set[str]] = {"authorizer": set(), "route": set(), "on_sqs_message": set()}
    for function in functions.values():
        kinds = {_decorator_name(d).rsplit(".", 1)[-1] for d in function.decorator_list}
        for kind in kinds & set(reached):
            seen: set[str] = set()
            todo = [function.name]
            while todo:
                name = todo.pop()
                if name in seen:
                    continue
                seen.add(name)
                calls = _called_names(functions[name])
                reached[kind] |= calls
                todo += [call for call in calls if call in functions]
    return reached
