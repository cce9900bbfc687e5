"""YAML text of Kubernetes manifests that kubectl reads back with the same types.

PyYAML (YAML 1.1) leaves a string such as ``123456e7`` unquoted because to PyYAML it is no number, but
kubectl's reader (go-yaml, with Go's number syntax) reads it as a float, and the API object then fails
to decode (``json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type
string``). An 8-digit hex id (``secrets.token_hex(4)``) takes that form about once in 185 draws. Every
string that Go could read as a number is therefore double-quoted; the rest is PyYAML's safe dump.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

#: Plain scalars that go-yaml resolves to a number (its float form, and Go's 0x/0o/0b integer prefixes).
GO_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?|[-+]?0[xXoObB][0-9a-fA-F_]+")


class ManifestDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, double-quoting the strings that kubectl would read as numbers."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if GO_NUMBER.fullmatch(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


ManifestDumper.add_representer(str, _represent_str)


def dump_manifests(*docs: Mapping[str, Any]) -> str:
    """YAML text of ``docs`` (one document, or several separated by ``---``), keys in the given order.

    Strings keep their type through ``kubectl apply -f -``; see the module docstring.
    """
    return yaml.dump_all([dict(d) for d in docs], Dumper=ManifestDumper, sort_keys=False, allow_unicode=True)
