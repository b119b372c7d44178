"""MkDocs hook: renders openapi.yaml as the site's HTTP API reference at build time.

The page is generated in memory on every build, so it can never drift from the spec
(which tests/reliability/test_openapi.py keeps true to the app's routes); nothing is fetched and no
script runs in the reader's browser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.utils.yaml import yaml_load

PAGE = "reference/api.md"
METHODS = ("get", "post", "put", "patch", "delete")
Schema = dict[str, Any]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the generated reference page beside the written ones."""
    spec_path = Path(config.config_file_path).parent / "openapi.yaml"
    spec = yaml_load(spec_path.read_text(encoding="utf-8"))
    files.append(File.generated(config, PAGE, content=render(spec)))
    return files


def render(spec: Schema) -> str:
    """The whole reference page, in Markdown, from a parsed OpenAPI 3.0 document."""
    renderer = _Renderer(spec)
    return renderer.page()


def anchor(method: str, path: str) -> str:
    """The anchor of one operation: `post-v1-sessions-session_id-raise`."""
    words = [part.strip("{}") for part in path.split("/") if part]
    return "-".join([method, *words]) if words else method


def _literal(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


class _Renderer:
    def __init__(self, spec: Schema) -> None:
        self.spec = spec
        self.components: Schema = spec.get("components", {})

    def resolve(self, node: Schema) -> tuple[str | None, Schema]:
        """A `$ref`'s last name and its target; (None, node) for an inline node."""
        ref = node.get("$ref")
        if ref is None:
            return None, node
        target: Any = self.spec
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        return ref.rsplit("/", 1)[-1], target

    def operations(self) -> list[tuple[str, str, Schema, list[Schema]]]:
        found = []
        for path, item in self.spec["paths"].items():
            shared = item.get("parameters", [])
            for method in METHODS:
                if method in item:
                    found.append((method, path, item[method], shared))
        return found

    def page(self) -> str:
        info = self.spec["info"]
        lines = [
            "# HTTP API reference",
            "",
            '!!! note "Generated from `openapi.yaml`"',
            f"    {info['title']} {info['version']}, OpenAPI {self.spec['openapi']}. This page is"
            " rendered from the spec on every docs build: edit `openapi.yaml`, not this page.",
            "",
            info.get("description", "").strip(),
            "",
            "## Routes",
            "",
            "| method | path | what it does |",
            "|---|---|---|",
        ]
        for method, path, operation, _ in self.operations():
            link = f"[`{path}`](#{anchor(method, path)})"
            lines.append(f"| {method.upper()} | {link} | {_cell(operation.get('summary', ''))} |")
        lines.append("")
        for method, path, operation, shared in self.operations():
            lines += self.operation(method, path, operation, shared)
        lines += ["## Schemas", ""]
        for name, schema in self.components.get("schemas", {}).items():
            lines += self.schema_section(name, schema)
        return "\n".join(lines) + "\n"

    def operation(self, method: str, path: str, op: Schema, shared: list[Schema]) -> list[str]:
        lines = [f"## {method.upper()} `{path}` {{#{anchor(method, path)}}}", ""]
        lines += [op.get("summary", ""), ""]
        if "description" in op:
            lines += [" ".join(op["description"].split()), ""]
        if op.get("security") == []:
            lines += ["No token needed.", ""]
        parameters = [self.resolve(p)[1] for p in [*shared, *op.get("parameters", [])]]
        if parameters:
            lines += ["| parameter | in | required | type | meaning |", "|---|---|---|---|---|"]
            for parameter in parameters:
                required = "yes" if parameter.get("required") else "no"
                kind = self.type_of(parameter.get("schema", {}))
                meaning = _cell(parameter.get("description", ""))
                where = f"`{parameter['name']}` | {parameter['in']}"
                lines.append(f"| {where} | {required} | {kind} | {meaning} |")
            lines.append("")
        if "requestBody" in op:
            _, body = self.resolve(op["requestBody"])
            for media, content in body.get("content", {}).items():
                lines += [f"**Request body** ({media}): {self.body_of(content.get('schema'))}", ""]
        lines += ["| status | when | body |", "|---|---|---|"]
        for status, response in op.get("responses", {}).items():
            lines.append(self.response_row(status, response))
        lines.append("")
        return lines

    def response_row(self, status: str, response: Schema) -> str:
        _, answer = self.resolve(response)
        parts = []
        for media, content in answer.get("content", {}).items():
            body = self.body_of(content.get("schema"))
            parts.append(body if media == "application/json" else f"{media}: {body}")
        headers = answer.get("headers", {})
        if headers:
            parts.append("headers: " + ", ".join(f"`{name}`" for name in headers))
        return f"| {status} | {_cell(answer.get('description', ''))} | {'; '.join(parts)} |"

    def body_of(self, schema: Schema | None) -> str:
        if schema is None:
            return ""
        name, target = self.resolve(schema)
        if name is not None:
            return self.link(name)
        if target.get("type") == "object" and "properties" in target:
            fields = ", ".join(
                f"`{field}`: {self.type_of(value)}" for field, value in target["properties"].items()
            )
            return _cell("{" + fields + "}")
        return self.type_of(target)

    def link(self, name: str) -> str:
        return f"[{name}](#schema-{name.lower()})"

    def type_of(self, schema: Schema) -> str:
        """A short, linked description of a schema's type and constraints."""
        name, schema = self.resolve(schema)
        if name is not None:
            return self.link(name)
        for combiner, word in (("allOf", " and "), ("anyOf", " or "), ("oneOf", " or ")):
            if combiner in schema:
                return word.join(self.type_of(part) for part in schema[combiner])
        kind = str(schema.get("type", "any"))
        if kind == "array":
            kind = f"array of {self.type_of(schema.get('items', {}))}"
        elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
            value = schema["additionalProperties"]
            inner = "object" if "properties" in value else self.type_of(value)
            kind = f"map of {inner}"
        if "enum" in schema:
            kind = " \\| ".join(f"`{_literal(value)}`" for value in schema["enum"])
        notes = []
        if "format" in schema:
            notes.append(schema["format"])
        if "minLength" in schema or "maxLength" in schema:
            notes.append(f"{schema.get('minLength', 0)}-{schema.get('maxLength', '')} chars")
        if "minimum" in schema or "maximum" in schema:
            notes.append(f"{schema.get('minimum', '')}..{schema.get('maximum', '')}")
        if "pattern" in schema:
            notes.append(f"`{schema['pattern']}`")
        if schema.get("nullable"):
            notes.append("or null")
        return kind + (f" ({', '.join(notes)})" if notes else "")

    def schema_section(self, name: str, schema: Schema) -> list[str]:
        lines = [f"### {name} {{#schema-{name.lower()}}}", ""]
        if "description" in schema:
            lines += [" ".join(schema["description"].split()), ""]
        own = schema
        if "allOf" in schema:
            parts = [self.resolve(part) for part in schema["allOf"]]
            based = [self.link(ref) for ref, _ in parts if ref is not None]
            inline = [part for ref, part in parts if ref is None]
            lines += ["All the fields of " + ", ".join(based) + ("; and:" if inline else "."), ""]
            own = inline[0] if inline else {}
        if "properties" in own:
            lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
            lines += self.field_rows(own, prefix="")
            lines.append("")
        elif "allOf" not in schema:
            lines += [f"Type: {self.type_of(schema)}", ""]
        return lines

    def field_rows(self, schema: Schema, prefix: str) -> list[str]:
        rows = []
        required = set(schema.get("required", []))
        for field, value in schema.get("properties", {}).items():
            _, target = self.resolve(value)
            needed = "yes" if field in required else "no"
            meaning = _cell(target.get("description", "")) if "$ref" not in value else ""
            rows.append(f"| `{prefix}{field}` | {self.type_of(value)} | {needed} | {meaning} |")
            if "$ref" in value:
                continue
            if "properties" in target:
                rows += self.field_rows(target, prefix=f"{prefix}{field}.")
            extra = target.get("additionalProperties")
            if isinstance(extra, dict) and "properties" in extra:
                rows += self.field_rows(extra, prefix=f"{prefix}{field}.<name>.")
        return rows
