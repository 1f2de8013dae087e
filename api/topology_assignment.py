"""The wire forms of a PodSet's TopologyAssignment: written as Kueue v1beta2 writes it, read in
both forms. Pure; every reader and writer of ``topologyAssignment`` goes through here.

- ``slices`` (Kueue v1beta2, what topogate writes): the domains in order, cut into at most 1000
  slices; in each slice every level is either one ``universal`` value or ``individual`` roots
  with a common ``prefix`` and ``suffix`` factored out, and the pod counts are ``universal`` or
  ``individual``. A 10,000-node assignment takes a fraction of the bytes of ``domains``.
- ``domains`` (Kueue v1beta1, and what topogate wrote before): ``[{values, count}]``.

:func:`encode` chooses the slices exactly as Kueue's ``V1Beta2From`` does with its default
feature gate ``TASAssignmentsEncodingByHostnamePrefix`` on, so the same domains give the same
slices, prefixes, suffixes and roots. Label values are ASCII (Kubernetes allows no other), so
Python's character positions are Go's byte positions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from .constants import HOSTNAME_LABEL, MAX_INT32  # domainCount, pod counts: int32
from .errors import InputError

MAX_SLICES = 1_000  # Kueue's MaxItems of TopologyAssignment.slices
MAX_DOMAINS_PER_SLICE = 100_000  # Kueue's MaxItems of roots and of podCounts.individual
MAX_VALUE_LENGTH = 63  # Kueue's MaxLength of universal, prefix, suffix and each root


@dataclass(frozen=True, slots=True)
class AssignedDomain:
    values: tuple[str, ...]  # one value per assignment level
    count: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """A decoded TopologyAssignment: the levels and every domain, in the written order."""

    levels: tuple[str, ...]
    domains: tuple[AssignedDomain, ...]


# --- encoding ------------------------------------------------------------------------------


def encode(levels: Sequence[str], domains: Sequence[AssignedDomain]) -> dict[str, Any]:
    """The ``slices`` form Kueue writes: hostname-prefix runs when they are smaller (or the
    only choice above 100,000 domains), else one compacted slice. Domains keep their order."""
    by_prefix = encode_hostname_runs(levels, domains)
    if len(by_prefix["slices"]) <= 1 or len(domains) > MAX_DOMAINS_PER_SLICE:
        return by_prefix
    single = encode_single(levels, domains)
    return single if wire_size(single) < wire_size(by_prefix) else by_prefix


def encode_single(levels: Sequence[str], domains: Sequence[AssignedDomain]) -> dict[str, Any]:
    """Every domain in one compacted slice (Kueue with the hostname-prefix gate off)."""
    slices = [_compact_slice(len(levels), domains)] if domains else []
    return {"levels": list(levels), "slices": slices}


def encode_domains(levels: Sequence[str], domains: Sequence[AssignedDomain]) -> dict[str, Any]:
    """The older ``domains`` form (Kueue v1beta1), for comparison only: topogate reads it but
    no longer writes it."""
    return {
        "levels": list(levels),
        "domains": [{"values": list(d.values), "count": d.count} for d in domains],
    }


def wire_size(topology: Mapping[str, Any]) -> int:
    """Bytes of the compact JSON Go's encoding/json writes for it (it escapes <, > and &)."""
    text = json.dumps(topology, separators=(",", ":"), ensure_ascii=False)
    escaped = text.count("<") + text.count(">") + text.count("&")
    return len(text.encode()) + 5 * escaped


def _compact_values(values: Sequence[str]) -> dict[str, Any]:
    """One level of a slice: ``universal`` when all values are equal, else the longest
    common prefix and suffix (not overlapping; the prefix gives way) around the roots."""
    shortest = min(map(len, values))
    prefix = _common_prefix(values)
    if len(prefix) == max(map(len, values)):
        return {"universal": prefix}
    suffix = _common_prefix([v[::-1] for v in values])[::-1]
    if len(prefix) + len(suffix) > shortest:
        prefix = prefix[: shortest - len(suffix)]
    individual: dict[str, Any] = {}
    if prefix:
        individual["prefix"] = prefix
    if suffix:
        individual["suffix"] = suffix
    start, cut = len(prefix), len(suffix)
    individual["roots"] = [v[start : len(v) - cut] for v in values]
    return {"individual": individual}


def _common_prefix(values: Sequence[str]) -> str:
    # The common prefix of all strings is that of the smallest and the largest.
    low, high = min(values), max(values)
    for i, char in enumerate(low):
        if char != high[i]:
            return low[:i]
    return low


def _compact_slice(level_count: int, domains: Sequence[AssignedDomain]) -> dict[str, Any]:
    counts = [d.count for d in domains]
    pod_counts: dict[str, Any] = (
        {"universal": counts[0]}
        if counts.count(counts[0]) == len(counts)
        else {"individual": counts}
    )
    return {
        "domainCount": len(domains),
        "valuesPerLevel": [
            _compact_values([d.values[level] for d in domains]) for level in range(level_count)
        ],
        "podCounts": pod_counts,
    }


def encode_hostname_runs(
    levels: Sequence[str], domains: Sequence[AssignedDomain]
) -> dict[str, Any]:
    """Kueue's hostname-prefix encoding: consecutive hosts sharing a reusable ``-``-ended
    prefix form one slice; runs are cut at 100,000 domains."""
    keys: list[str] | None = None
    if len(domains) > 1 and levels and levels[-1] == HOSTNAME_LABEL:
        keys = hostname_prefix_keys([d.values[-1] for d in domains])
    slices = []
    for start, end in _runs(len(domains), keys):
        for chunk in range(start, end, MAX_DOMAINS_PER_SLICE):
            part = domains[chunk : min(end, chunk + MAX_DOMAINS_PER_SLICE)]
            slices.append(_compact_slice(len(levels), part))
    return {"levels": list(levels), "slices": slices}


def _runs(total: int, keys: Sequence[str] | None) -> list[tuple[int, int]]:
    """[start, end) of each run of equal consecutive keys (one run without keys)."""
    if total == 0:
        return []
    if not keys:
        return [(0, total)]
    out, start = [], 0
    for i in range(1, total):
        if keys[i] != keys[start]:
            out.append((start, i))
            start = i
    out.append((start, total))
    return out


def hostname_prefix_keys(hostnames: Sequence[str]) -> list[str] | None:
    """Each host's run key: its longest ``-``-ended prefix that at least two hosts share
    ("" when none), trying shorter prefixes while the runs would need more than 1000 slices.
    None when no depth fits (or no host has a ``-`` before its end)."""
    candidates = [_dash_prefixes(h) for h in hostnames]
    seen_once: set[str] = set()
    reusable: set[str] = set()
    for prefixes in candidates:
        for prefix in prefixes:
            (reusable if prefix in seen_once else seen_once).add(prefix)
    depth = max(map(len, candidates), default=0)
    while depth >= 1:
        keys = [_longest_reusable(prefixes[:depth], reusable) for prefixes in candidates]
        runs = _runs(len(keys), keys)
        needed = sum(-(-(end - start) // MAX_DOMAINS_PER_SLICE) for start, end in runs)
        if needed <= MAX_SLICES:
            return keys
        depth -= 1
    return None


def _dash_prefixes(hostname: str) -> list[str]:
    """The prefixes ending at a ``-`` that is not the last character, shortest first."""
    parts = hostname.split("-")
    count = len(parts) - 1 if parts[-1] else len(parts) - 2
    return list(accumulate(part + "-" for part in parts[:count])) if count > 0 else []


def _longest_reusable(prefixes: Sequence[str], reusable: set[str]) -> str:
    for prefix in reversed(prefixes):
        if prefix in reusable:
            return prefix
    return ""


# --- decoding ------------------------------------------------------------------------------


def decode(topology: Any, where: str = "", field: str = "") -> Assignment:
    """Either form, checked: a malformed assignment raises :class:`InputError` naming
    ``where`` (the object) and the field inside it (``field`` is the assignment's path)."""
    if not isinstance(topology, Mapping):
        raise InputError("must be an object", where=where, field=field)
    levels = _strings(topology.get("levels"), where, _at(field, "levels"))
    if not levels:
        raise InputError("must list at least one level", where=where, field=_at(field, "levels"))
    slices, domains = topology.get("slices"), topology.get("domains")
    if slices is not None and domains is not None:
        raise InputError(
            "set either slices or domains, not both", where=where, field=_at(field, "domains")
        )
    if domains is not None:
        found = _decode_domains(len(levels), domains, where, _at(field, "domains"))
    else:
        found = []
        items = _list(slices or [], where, _at(field, "slices"))
        if len(items) > MAX_SLICES:
            raise InputError(
                f"has {len(items)} slices; at most {MAX_SLICES} are allowed",
                where=where,
                field=_at(field, "slices"),
            )
        for i, item in enumerate(items):
            found.extend(_decode_slice(len(levels), item, where, _at(field, f"slices[{i}]")))
    return Assignment(tuple(levels), tuple(found))


def _at(field: str, suffix: str) -> str:
    return f"{field}.{suffix}" if field else suffix


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(value: Any, where: str, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise InputError("must be a list", where=where, field=field)
    return value


def _strings(value: Any, where: str, field: str) -> list[str]:
    items = _list(value, where, field)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise InputError("must be a string", where=where, field=f"{field}[{i}]")
    return items


def _count(value: Any, where: str, field: str, most: int = MAX_INT32) -> int:
    if not _is_int(value) or not 1 <= value <= most:
        raise InputError(
            f"must be an integer of at least 1 and at most {most}, not {value!r}",
            where=where,
            field=field,
        )
    return int(value)


def _text(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise InputError("must be a string", where=where, field=field)
    if len(value) > MAX_VALUE_LENGTH:
        raise InputError(
            f"is {len(value)} characters long; at most {MAX_VALUE_LENGTH} are allowed",
            where=where,
            field=field,
        )
    return value


def _decode_domains(level_count: int, domains: Any, where: str, field: str) -> list[AssignedDomain]:
    out = []
    for i, item in enumerate(_list(domains, where, field)):
        at = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise InputError("must be an object", where=where, field=at)
        values = _strings(item.get("values"), where, f"{at}.values")
        if len(values) != level_count:
            raise InputError(
                f"has {len(values)} value(s) for {level_count} level(s)",
                where=where,
                field=f"{at}.values",
            )
        out.append(AssignedDomain(tuple(values), _count(item.get("count"), where, f"{at}.count")))
    return out


def _decode_slice(level_count: int, item: Any, where: str, field: str) -> list[AssignedDomain]:
    if not isinstance(item, Mapping):
        raise InputError("must be an object", where=where, field=field)
    size = _count(item.get("domainCount"), where, _at(field, "domainCount"), MAX_DOMAINS_PER_SLICE)
    per_level = _list(item.get("valuesPerLevel"), where, _at(field, "valuesPerLevel"))
    if len(per_level) != level_count:
        raise InputError(
            f"has {len(per_level)} entries for {level_count} level(s); valuesPerLevel must "
            "have the same length as levels",
            where=where,
            field=_at(field, "valuesPerLevel"),
        )
    if size > 1 and all(isinstance(e, Mapping) and e.get("individual") is None for e in per_level):
        # Checked before expanding: a few bytes must not become domainCount copies.
        raise InputError(
            f"{size} domains with every level universal are one domain {size} times; "
            "write it once (domainCount 1) with all its pods",
            where=where,
            field=_at(field, "domainCount"),
        )
    columns = [
        _level_values(entry, size, where, _at(field, f"valuesPerLevel[{level}]"))
        for level, entry in enumerate(per_level)
    ]
    counts = _pod_counts(item.get("podCounts"), size, where, _at(field, "podCounts"))
    rows = zip(*columns, strict=True)
    return [AssignedDomain(values, count) for values, count in zip(rows, counts, strict=True)]


def _exactly_one(entry: Any, where: str, field: str) -> tuple[str, Any]:
    if not isinstance(entry, Mapping):
        raise InputError("must be an object", where=where, field=field)
    present = [k for k in ("universal", "individual") if entry.get(k) is not None]
    if len(present) != 1:
        raise InputError(
            "exactly one of universal and individual must be set", where=where, field=field
        )
    return present[0], entry[present[0]]


def _level_values(entry: Any, size: int, where: str, field: str) -> list[str]:
    kind, value = _exactly_one(entry, where, field)
    if kind == "universal":
        return [_text(value, where, f"{field}.universal")] * size
    at = f"{field}.individual"
    if not isinstance(value, Mapping):
        raise InputError("must be an object", where=where, field=at)
    prefix = _text(value.get("prefix") or "", where, f"{at}.prefix")
    suffix = _text(value.get("suffix") or "", where, f"{at}.suffix")
    roots = _list(value.get("roots"), where, f"{at}.roots")
    _same_length(roots, size, where, f"{at}.roots")
    for i, root in enumerate(roots):
        _text(root, where, f"{at}.roots[{i}]")
    return [f"{prefix}{root}{suffix}" for root in roots]


def _pod_counts(entry: Any, size: int, where: str, field: str) -> list[int]:
    kind, value = _exactly_one(entry, where, field)
    if kind == "universal":
        return [_count(value, where, f"{field}.universal")] * size
    counts = _list(value, where, f"{field}.individual")
    _same_length(counts, size, where, f"{field}.individual")
    return [_count(c, where, f"{field}.individual[{i}]") for i, c in enumerate(counts)]


def _same_length(items: Sequence[Any], size: int, where: str, field: str) -> None:
    if len(items) != size:
        raise InputError(
            f"has {len(items)} entries; it must have domainCount ({size})", where=where, field=field
        )
