"""Kubernetes name rules that topogate checks itself (label keys, label values)."""

from __future__ import annotations

import re

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (a qualified name), or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"{key!r} is not a valid label key: the prefix before '/' is empty"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"{key!r} is not a valid label key: prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _NAME.match(name):
        return (
            f"{key!r} is not a valid label key: the name part must be 1-63 characters, "
            "alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None."""
    if value == "":
        return None
    if len(value) > 63 or not _NAME.match(value):
        return f"{value!r} is not a valid label value"
    return None
