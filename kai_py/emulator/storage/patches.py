"""Patch types: JSON merge (RFC 7386), JSON patch (RFC 6902), strategic merge.

Strategic merge follows the Go struct tags of the built-in types only as far
as re-applying a manifest needs: lists of objects are merged by the key
Kubernetes uses for them (containers by ``name``, conditions by ``type`` ...),
``$patch: delete|replace`` and ``$deleteFromPrimitiveList`` are honoured,
ordering directives (``$setElementOrder``) and ``$retainKeys`` are accepted
and ignored.
"""

from __future__ import annotations

from typing import Any

from kai_py.api.jsoncodec import copy as copy_json
from kai_py.emulator.storage.errors import ApiError, bad_request

JSON = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy_json(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---- JSON patch ---------------------------------------------------------------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error(f"invalid JSON pointer {path!r}")
    return [_unescape(t) for t in path[1:].split("/")]


def _patch_error(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise _patch_error(f'doc is missing path: "{path}": missing value')
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                cur = cur[int(t)]
            except (ValueError, IndexError):
                raise _patch_error(f'doc is missing path: "{path}": missing value') from None
        else:
            raise _patch_error(f'doc is missing path: "{path}": missing value')
    return cur


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for t in _pointer(path):
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list) and t.isdigit() and int(t) < len(cur):
            cur = cur[int(t)]
        else:
            raise _patch_error(f'doc is missing path: "{path}": missing value')
    return cur


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                idx = int(last)
            except ValueError:
                raise _patch_error(f"invalid array index {last!r}") from None
            if idx < 0 or idx > len(parent):
                raise _patch_error(
                    f'add operation does not apply: doc is missing path: "{path}": missing value'
                )
            parent.insert(idx, value)
    else:
        raise _patch_error(f'doc is missing path: "{path}": missing value')
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise _patch_error(
            f'remove operation does not apply: doc is missing path: "{path}": missing value'
        )
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy_json(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request(
                "the server rejected our request due to an error in our "
                "request: invalid JSON patch operation"
            )
        kind, path = op["op"], op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy_json(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = (
                _add(_remove(doc, path), path, copy_json(op.get("value")))
                if _pointer(path)
                else copy_json(op.get("value"))
            )
        elif kind == "move":
            value = _get(doc, op["from"])
            doc = _add(_remove(doc, op["from"]), path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy_json(_get(doc, op["from"])))
        elif kind == "test":
            try:
                got = _get(doc, path)
            except ApiError:
                got = _MISSING
            if got != op.get("value"):
                raise _patch_error(
                    f"the server rejected our request due to an error in our "
                    f"request: testing value {path} failed: test failed"
                )
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc


_MISSING = object()

# ---- strategic merge ----------------------------------------------------------------------

#: Field name -> merge key, from the patchMergeKey tags of the built-in Go types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "addresses": "type",
    "schedulingGates": "name",
}
#: Primitive lists with patchStrategy=merge: union instead of replace.
MERGED_PRIMITIVE_LISTS = frozenset({"finalizers"})


def strategic_merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy_json(patch)
    if patch.get("$patch") == "replace":
        return {k: copy_json(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    deferred_deletes: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deferred_deletes[key.split("/", 1)[1]] = value or []
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    for key, values in deferred_deletes.items():
        if isinstance(result.get(key), list):
            result[key] = [v for v in result[key] if v not in values]
    return result


def _merge_key(field: str, current: Any, patch: list[Any]) -> str | None:
    key = MERGE_KEYS.get(field)
    if field == "ports":
        # Container ports merge by containerPort, Service ports by port.
        items = [i for i in (current or []) + patch if isinstance(i, dict)]
        key = "containerPort" if any("containerPort" in i for i in items) else "port"
    return key


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    merge_key = _merge_key(field, current, patch)
    if merge_key and any(
        isinstance(p, dict) and merge_key not in p and "$patch" not in p for p in patch
    ):
        merge_key = None  # items without their key cannot be merged: replace the list
    if field in MERGED_PRIMITIVE_LISTS and isinstance(current, list):
        out = list(current)
        out.extend(v for v in patch if v not in out)
        return out
    if (
        not merge_key
        or not isinstance(current, list)
        or not all(isinstance(p, dict) for p in patch)
    ):
        return [copy_json(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy_json(p) for p in patch if p.get("$patch") != "replace"]
    out = [copy_json(c) for c in current]
    index = {c.get(merge_key): i for i, c in enumerate(out) if isinstance(c, dict)}
    deleted: set[Any] = set()
    for item in patch:
        key = item.get(merge_key)
        if item.get("$patch") == "delete":
            deleted.add(key)
            continue
        if key in index:
            out[index[key]] = strategic_merge(out[index[key]], item)
        else:
            index[key] = len(out)
            out.append(strategic_merge({}, item))
    return [c for c in out if not (isinstance(c, dict) and c.get(merge_key) in deleted)]


def drop_unapplied(
    live: Any, previous: Any, applied: Any, field: str = "", *, keyed_lists: bool = True
) -> None:
    """Server-side apply: remove from ``live`` what one field manager applied before
    (``previous``) and no longer applies (``applied``). Lists with a merge key lose
    the items the manager dropped; other lists are replaced by the merge anyway."""
    if isinstance(live, dict) and isinstance(previous, dict):
        applied = applied if isinstance(applied, dict) else {}
        for key, old in previous.items():
            if key not in applied:
                live.pop(key, None)
            elif key in live:
                drop_unapplied(live[key], old, applied[key], key, keyed_lists=keyed_lists)
    elif isinstance(live, list) and isinstance(previous, list) and isinstance(applied, list):
        merge_key = _merge_key(field, live, applied) if keyed_lists else None
        if not merge_key:
            return  # atomic lists are replaced by the merge anyway
        kept = {item.get(merge_key) for item in applied if isinstance(item, dict)}
        gone = {item.get(merge_key) for item in previous if isinstance(item, dict)} - kept
        live[:] = [
            item for item in live if not (isinstance(item, dict) and item.get(merge_key) in gone)
        ]
        by_key = {item.get(merge_key): item for item in applied if isinstance(item, dict)}
        for item in live:
            if isinstance(item, dict):
                old_item = next(
                    (
                        p
                        for p in previous
                        if isinstance(p, dict) and p.get(merge_key) == item.get(merge_key)
                    ),
                    None,
                )
                if old_item is not None and item.get(merge_key) in by_key:
                    drop_unapplied(item, old_item, by_key[item.get(merge_key)])
