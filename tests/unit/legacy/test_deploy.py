"""The deploy pipeline's pure parts (xpushare/deploy/k8s_pipeline.py): structural manifest rendering, rsync/ssh
argv, the SFTP archive, git tag and auto-commit, parameters; and the tasks' wiring."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.deploy import k8s_pipeline, k8s_render, source_sync
from xpushare.inventory.schema import ClusterSpec, HostSpec, SshOptions
from xpushare.inventory.sut import sut_names
from xpushare.model.errors import UsageError

ROOT = REPO_ROOT
XP, NV = sut_names("xpushare"), sut_names("nvshare")


def env_of(container: dict, name: str) -> list[dict]:
    return [e for e in container.get("env") or [] if e.get("name") == name]


def test_scheduler_mode_is_set_once_in_the_env_list() -> None:
    for mode in k8s_render.MODES:
        doc = k8s_render.render_scheduler(XP, "reg/xpushare-scheduler:abcd1234", mode)
        c = doc["spec"]["template"]["spec"]["containers"][0]
        assert env_of(c, "XPUSHARE_SCHEDULING_MODE") == [{"name": "XPUSHARE_SCHEDULING_MODE", "value": mode}]
        assert c["image"] == "reg/xpushare-scheduler:abcd1234"
        # The CUDA form: NVML injected, host pids (docs/sut/README.md §pitfalls item 4).
        assert env_of(c, "NVIDIA_VISIBLE_DEVICES")[0]["value"] == "all"
        assert env_of(c, "NVIDIA_DRIVER_CAPABILITIES")[0]["value"] == "utility"
        assert doc["spec"]["template"]["spec"]["hostPID"] is True
        # Only one "env" key can exist in a mapping: re-parsing the dump keeps the whole list.
        again = yaml.safe_load(yaml.safe_dump(doc))
        assert again == doc


def test_a_template_with_duplicate_mode_entries_ends_with_one() -> None:
    template = k8s_render.load_template("scheduler.yaml")
    c = template["spec"]["template"]["spec"]["containers"][0]
    c["env"] = [{"name": "A", "value": "1"}, {"name": "XPUSHARE_SCHEDULING_MODE", "value": "auto"},
                {"name": "B", "value": "2"}, {"name": "XPUSHARE_SCHEDULING_MODE", "value": "concurrent"}]
    doc = k8s_render.render_scheduler(XP, "img", "serial", template)
    env = doc["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["A", "XPUSHARE_SCHEDULING_MODE", "B"]
    assert env[1]["value"] == "serial"
    # A template without env gets the list.
    c.pop("env")
    doc = k8s_render.render_scheduler(XP, "img", "auto", template)
    assert doc["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "XPUSHARE_SCHEDULING_MODE", "value": "auto"}]


def test_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="scheduling mode"):
        k8s_render.render_scheduler(XP, "img", "fast")


def test_nvshare_generation_is_a_structural_rename() -> None:
    images = k8s_render.image_names(NV, "reg", "t")
    doc = k8s_render.render_scheduler(NV, images["scheduler"], "serial")
    text = yaml.safe_dump(doc)
    assert "xpushare" not in text.lower()
    assert doc["metadata"] == {"name": "nvshare-scheduler", "namespace": "nvshare-system",
                               "labels": {"name": "nvshare-scheduler"}}
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert env_of(c, "NVSHARE_SCHEDULING_MODE") == [{"name": "NVSHARE_SCHEDULING_MODE", "value": "serial"}]
    assert c["image"] == "reg/nvshare-scheduler:t"
    assert doc["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] == "/var/run/nvshare"


def test_device_plugin_cuda_form() -> None:
    images = k8s_render.image_names(XP, "reg", "abcd1234", {"lib": "other/lib:1"})
    assert images == {"scheduler": "reg/xpushare-scheduler:abcd1234",
                      "device_plugin": "reg/xpushare-device-plugin:abcd1234", "lib": "other/lib:1"}
    doc = k8s_render.render_device_plugin(XP, images, virtual_devices=8, plugin_gpus=4)
    containers = {c["name"]: c for c in doc["spec"]["template"]["spec"]["containers"]}
    assert containers["xpushare-lib"]["image"] == "other/lib:1"
    plugin = containers["xpushare-device-plugin"]
    assert plugin["image"] == "reg/xpushare-device-plugin:abcd1234"
    assert env_of(plugin, "XPUSHARE_VIRTUAL_DEVICES") == [{"name": "XPUSHARE_VIRTUAL_DEVICES", "value": "8"}]
    assert plugin["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert "ASCEND" not in yaml.safe_dump(doc)
    doc = k8s_render.render_device_plugin(XP, images, virtual_devices=10, plugin_gpus=0)
    plugin = {c["name"]: c for c in doc["spec"]["template"]["spec"]["containers"]}["xpushare-device-plugin"]
    assert "nvidia.com/gpu" not in plugin["resources"]["limits"]


def spec(policy: str = "strict", **ssh: object) -> HostSpec:
    opts = SshOptions(user="root", port=2222, identity="/keys/id", host_key_policy=policy, known_hosts="/kh",
                      **ssh)  # type: ignore[arg-type]
    return HostSpec(name="build", roles=("master",), address="127.0.0.5", ssh=opts)


def test_ssh_and_rsync_argv_follow_the_inventory() -> None:
    argv = source_sync.ssh_command(spec())
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    line = " ".join(argv)
    for pair in ("-p 2222", "-l root", "-i /keys/id", "-o StrictHostKeyChecking=yes", "-o UserKnownHostsFile=/kh"):
        assert f" {pair}" in line, pair
    assert "StrictHostKeyChecking=accept-new" in source_sync.ssh_command(spec("accept-new"))
    ignore = source_sync.ssh_command(spec("ignore"))
    assert "StrictHostKeyChecking=no" in ignore and "UserKnownHostsFile=/dev/null" in ignore
    assert source_sync.ssh_command(spec(ssh_config="/cfg"))[5:7] == ["-F", "/cfg"]
    rs = source_sync.rsync_argv("rsync", Path("/src"), spec(), "code/xpushare", [".idea", ".tmplog"])
    assert rs[:6] == ["rsync", "-az", "--exclude", ".idea", "--exclude", ".tmplog"]
    assert rs[6] == "-e" and rs[7].startswith("ssh -o BatchMode=yes")
    assert rs[-2:] == ["/src/", "127.0.0.5:code/xpushare/"]
    local = HostSpec(name="here", roles=("master",), local=True)
    assert source_sync.rsync_argv("rsync", Path("/src"), local, "/dst", [])[-2:] == ["/src/", "/dst/"]


def test_archive_leaves_out_excluded_names_at_any_depth(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for rel in ("Makefile", ".git/HEAD", "a/.idea/x.xml", "a/b/c.go", ".tmplog/r/x", "a/.DS_Store"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    archive = tmp_path / "a.tgz"
    count = source_sync.make_archive(src, archive, [".idea", ".tmplog", ".DS_Store"])
    with tarfile.open(archive) as tar:
        files = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert files == ["./.git/HEAD", "./Makefile", "./a/b/c.go"] and count == 3


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "HOME": str(repo.parent), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def test_git_tag_and_auto_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "sut"
    repo.mkdir()
    with pytest.raises(source_sync.StepFailed, match="deploy_tag"):
        source_sync.git_tag(repo)
    for key, value in (("GIT_AUTHOR_NAME", "t"), ("GIT_AUTHOR_EMAIL", "t@example.invalid"),
                       ("GIT_COMMITTER_NAME", "t"), ("GIT_COMMITTER_EMAIL", "t@example.invalid")):
        monkeypatch.setenv(key, value)
    git(repo, "init", "-q")
    (repo / "f").write_text("1")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    head = git(repo, "rev-parse", "HEAD").strip()
    assert source_sync.git_tag(repo) == head[:8]
    with pytest.raises(source_sync.StepSkipped, match="nothing to commit"):
        source_sync.auto_commit(repo, "invoke deploy")
    (repo / "f").write_text("2")
    (repo / "new").write_text("x")
    detail = source_sync.auto_commit(repo, "invoke deploy")
    assert detail.startswith("committed 2 change(s)")
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "log", "-1", "--format=%s").startswith("wip: auto-commit by invoke deploy [")
    assert source_sync.git_tag(repo) != head[:8]


def cluster(**params: object) -> ClusterSpec:
    return ClusterSpec(name="c", mode="k8s", sut="xpushare", backend="cuda", gpu_model=None, gpu_memory_gib=None,
                       hosts=(HostSpec(name="m", roles=("master",), address="127.0.0.9"),), params=params)


def test_deploy_params_layering_and_unknown_names() -> None:
    p = k8s_pipeline.deploy_params(cluster(deploy_make="make build-base all", func003_pods=4),
                             ["deploy_tag=abc", "deploy_plugin_gpus=1"], lenient=False)
    assert p["deploy_make"] == "make build-base all" and p["deploy_tag"] == "abc" and p["deploy_plugin_gpus"] == 1
    assert "func003_pods" not in p
    with pytest.raises(UsageError, match="unknown deploy parameter"):
        k8s_pipeline.deploy_params(cluster(), ["deploy_mak=x"], lenient=False)
    assert k8s_pipeline.deploy_params(cluster(), ["legacy_step_s=3"], lenient=True)["deploy_make"] == ["make", "all"]
    assert k8s_pipeline._make_argv("make  build-base all") == ["make", "build-base", "all"]


def test_cleanup_labels_cover_every_legacy_scenario() -> None:
    labels = k8s_pipeline.cleanup_labels(NV)
    assert "app=nvshare-cross-gpu" in labels and "app=baseline-test" in labels and len(labels) == 8


def invoke(*args: str) -> subprocess.CompletedProcess:
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=ROOT, timeout=120)


def test_tasks_are_wired_and_usage_errors_exit_2(tmp_path: Path) -> None:
    listed = invoke("--list").stdout
    for name in ("deploy", "baseline-compare", "legacy.cross-gpu", "legacy.small", "legacy.idle-small",
                 "legacy.baseline", "legacy.memlimit", "legacy.dynamic-limit", "legacy.compute-limit",
                 "legacy.complex", "legacy.complex2", "legacy.smoke"):
        assert f"  {name} " in listed or f"  {name}\n" in listed, name
    inv = tmp_path / "inv.yaml"
    inv.write_text("clusters:\n  k: {mode: k8s, hosts: {k-m: {address: 127.0.0.9, roles: [master]}}}\n")
    proc = invoke("legacy.cross-gpu", "0", "--cluster", "k", "--inventory", str(inv), "--skip-setup")
    assert proc.returncode == 2 and "at least 1" in proc.stderr
    proc = invoke("legacy.small", "2", "--cluster", "local", "--skip-setup")
    assert proc.returncode == 2 and "need Kubernetes" in proc.stderr
    proc = invoke("legacy.small", "2", "--cluster", "k", "--inventory", str(inv), "--skip-setup",
                  "--set", "legacy_nope=1")
    assert proc.returncode == 2 and "unknown parameter" in proc.stderr
    proc = invoke("deploy", "--cluster", "k", "--inventory", str(inv), "--mode", "fast")
    assert proc.returncode == 2 and "--mode must be one of" in proc.stderr
    proc = invoke("deploy", "--cluster", "k", "--inventory", str(inv))
    assert proc.returncode == 2 and "--source" in proc.stderr
    proc = invoke("baseline-compare", "--run-id", "missing", "--root", str(tmp_path))
    assert proc.returncode == 2 and "no run" in proc.stderr
