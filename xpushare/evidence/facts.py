"""Host facts for ``invoke ping``: one fixed remote script and a pure parser of its ``key=value`` output."""

from __future__ import annotations

from dataclasses import dataclass

# A constant script (no user values inside): each line is key=value; missing tools print nothing.
FACTS_SCRIPT = r"""
echo "hostname=$(uname -n)"
echo "kernel=$(uname -r)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu=/'
fi
k="${XPUSHARE_FACTS_KUBECTL:-}"
if [ -n "$k" ] && command -v "$k" >/dev/null 2>&1; then
  "$k" version --client -o yaml 2>/dev/null | sed -n 's/^  gitVersion: /kubectl_client=/p' | head -1
  "$k" version -o yaml --request-timeout=5s 2>/dev/null | sed -n '/serverVersion/,$p' \
    | sed -n 's/^  gitVersion: /kubectl_server=/p' | head -1
fi
"""


@dataclass(frozen=True)
class HostFacts:
    """What ``ping`` reports of a host. ``gpus`` are ``(index, name)``; empty when there is no nvidia-smi."""

    hostname: str | None
    kernel: str | None
    gpus: tuple[tuple[int, str], ...]
    driver: str | None
    kubectl_client: str | None
    kubectl_server: str | None


def facts_argv(kubectl: str | None = None, kubeconfig: str | None = None) -> list[str]:
    """argv that prints the facts; ``kubectl`` (on masters) adds client and server versions."""
    argv = ["sh", "-c", FACTS_SCRIPT]
    if kubectl:
        env = [f"XPUSHARE_FACTS_KUBECTL={kubectl}"] + ([f"KUBECONFIG={kubeconfig}"] if kubeconfig else [])
        return ["env", *env, *argv]
    return argv


def parse_facts(text: str) -> HostFacts:
    """Parse the script's ``key=value`` lines; unknown or malformed lines are ignored."""
    values: dict[str, str] = {}
    gpus: list[tuple[int, str]] = []
    driver = None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if key == "gpu":
            parts = [p.strip() for p in value.split(",")]
            if len(parts) >= 3 and parts[0].isdigit():
                gpus.append((int(parts[0]), parts[1]))
                driver = driver or parts[2]
        elif key in ("hostname", "kernel", "kubectl_client", "kubectl_server") and value:
            values[key] = value
    return HostFacts(
        hostname=values.get("hostname"),
        kernel=values.get("kernel"),
        gpus=tuple(gpus),
        driver=driver,
        kubectl_client=values.get("kubectl_client"),
        kubectl_server=values.get("kubectl_server"),
    )
