"""Reading manifests from YAML files and folders, with errors that name the file."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from kai_py.state.documents import Document, InputError

_SUFFIXES = (".yaml", ".yml", ".json")
#: The path that means standard input (`kubectl get ... -o yaml | kai-py simulate -`).
STDIN = Path("-")


def _files(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path == STDIN:
            found.append(path)
        elif path.is_dir():
            found.extend(
                sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
            )
        elif path.exists():
            found.append(path)
        else:
            raise InputError([f"{path}: no such file or folder"])
    return found


def load_documents(paths: Iterable[Path]) -> list[Document]:
    problems: list[str] = []
    docs: list[Document] = []
    for path in _files(paths):
        try:
            text = sys.stdin.read() if path == STDIN else path.read_text(encoding="utf-8")
            parsed = list(yaml.safe_load_all(text))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{'<stdin>' if path == STDIN else path}: cannot read: {exc}")
            continue
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
            name = "<stdin>" if path == STDIN else str(path)
            problems.append(f"{name}{at}: not valid YAML: {getattr(exc, 'problem', exc)}")
            continue
        for index, body in enumerate(parsed, start=1):
            if body is None:
                continue
            name = "<stdin>" if path == STDIN else str(path)
            source = f"{name}#{index}" if len(parsed) > 1 else name
            if not isinstance(body, Mapping):
                problems.append(
                    f"{source}: expected a Kubernetes object (a mapping), got {type(body).__name__}"
                )
                continue
            if body.get("kind") == "List" or str(body.get("kind", "")).endswith("List"):
                for i, item in enumerate(body.get("items") or []):
                    if isinstance(item, Mapping):
                        docs.append(Document(f"{source} items[{i}]", item))
                    else:
                        problems.append(f"{source}: items[{i}]: expected a Kubernetes object")
                continue
            docs.append(Document(source, body))
    if problems:
        raise InputError(problems)
    return docs
