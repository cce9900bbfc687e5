"""Manifest YAML keeps strings strings through the real kubectl (go-yaml reads ``1234e567`` as a number)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from xpushare.transport.kube_errors import KubeError
from xpushare.transport.kubectl import Kubectl
from xpushare.transport.manifest_yaml import GO_NUMBER, dump_manifests

pytest_plugins = ["tests.lab.fixtures"]  # lab_cluster, lab_kubectl

#: Strings PyYAML leaves unquoted that Go may read as numbers (hex ids of secrets.token_hex(4) can look like the first
#: two; go-yaml keeps an out-of-range one such as 1234e567 a string, but quoting it costs nothing).
GO_NUMBERS = ("123456e7", "1234e567", "1e5", "1E5", "1e+5", "12.5e3", "0o17", "0X1F", ".5e1")
PLAIN = ("abc", "e12", "12e", "perf-011-q25", "4Gi", "a7690", "1.2.3", "v1")


@pytest.mark.parametrize("text", GO_NUMBERS)
def test_go_numbers_are_double_quoted(text: str) -> None:
    out = dump_manifests({"metadata": {"labels": {"run": text}}})
    assert f'run: "{text}"' in out
    assert yaml.safe_load(out)["metadata"]["labels"]["run"] == text


@pytest.mark.parametrize("text", PLAIN)
def test_other_strings_are_left_to_pyyaml(text: str) -> None:
    assert not GO_NUMBER.fullmatch(text)
    assert dump_manifests({"k": text}) == yaml.safe_dump({"k": text})


def test_documents_keep_key_order_types_and_separators() -> None:
    docs = [{"kind": "Pod", "apiVersion": "v1", "n": 5, "flag": True, "s": "12"}, {"kind": "ConfigMap"}]
    out = dump_manifests(*docs)
    assert out.splitlines()[:2] == ["kind: Pod", "apiVersion: v1"] and "\n---\n" in out
    assert list(yaml.safe_load_all(out)) == docs


def pod(run: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"yaml-{run.lower()}", "labels": {"test": "yaml", "run": run}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "lab/python:3", "command": ["python", "-c", "pass"]}]}}


def test_real_kubectl_applies_hex_like_label_values(lab_kubectl: Kubectl) -> None:
    k = lab_kubectl
    try:
        with pytest.raises(KubeError, match="cannot unmarshal number"):  # what PyYAML alone sends
            k.apply(yaml.safe_dump(pod("123456e7")))
        applied = k.apply(dump_manifests(pod("123456e7"), pod("1e5")))
        assert [o["metadata"]["labels"]["run"] for o in applied] == ["123456e7", "1e5"]
        assert {p.name for p in k.list_pods("test=yaml,run=123456e7")} == {"yaml-123456e7"}
    finally:
        k.delete("test=yaml", grace_period_s=0)
