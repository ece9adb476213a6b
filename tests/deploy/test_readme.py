"""The documentation's copy-paste instructions, run: the docker run lines' exporter
arguments and environment (docs/deploy.md, and the README's own line), and the TLS
walk-through (docs/tls-auth.md: its openssl command, its web.yml, its curl)."""

from __future__ import annotations

import re
import shlex
import socket
import ssl
import subprocess
from pathlib import Path

import bcrypt

from tests.helpers import REPO, require_tool, run_cli
from tests.web.serve import tls_exporter

README = REPO / "README.md"
DEPLOY = REPO / "docs" / "deploy.md"
TLS = REPO / "docs" / "tls-auth.md"
IMAGE = "gpu-exporter:0.1.0"


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def commands(block: str) -> list[str]:
    return [c.strip() for c in block.replace("\\\n", " ").splitlines()
            if c.strip() and not c.strip().startswith("#")]


def docker_runs() -> list[list[str]]:
    out = []
    for block in shell_blocks(DEPLOY.read_text()):
        for cmd in commands(block):
            if cmd.startswith("docker run"):
                out.append(shlex.split(cmd.replace("$(hostname)", "readme-host")))
    return out


def test_docker_run_lines_start_the_real_exporter() -> None:
    runs = docker_runs()
    assert len(runs) == 2, runs
    plain, ebpf = runs
    for words in runs:
        image_at = words.index(IMAGE)
        args = [a.replace("/host/sys", "/sys").replace("/host/proc", "/proc")
                for a in words[image_at + 1:]]
        env = {}
        for i, w in enumerate(words[:image_at]):
            if w == "-e":
                k, v = words[i + 1].split("=", 1)
                env[k] = v
        if "GPU_EXPORTER_COLLECTOR_EBPF" in env:
            # The eBPF collector itself is proven in tests/ebpf; here: the flags parse.
            env["GPU_EXPORTER_COLLECTOR_EBPF"] = "false"
        res = run_cli(["dump", *args], env=env, timeout=120)
        assert res.returncode == 0, (words, res.stderr)
        assert 'host_name="readme-host"' in res.stdout
    caps = {ebpf[i + 1] for i, w in enumerate(ebpf) if w == "--cap-add"}
    assert caps == {"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"}
    assert "--pid=host" in ebpf and "--pid=host" not in plain
    assert "--cap-add" not in plain and "--privileged" not in plain + ebpf


def test_readme_docker_line_is_the_documented_plain_run() -> None:
    # The README's one-line container example (inline, in "Deploy it") runs what
    # docs/deploy.md's plain run runs: the same image, mounts and exporter arguments.
    lines = re.findall(r"`(docker run [^`]+)`", " ".join(README.read_text().split()))
    assert len(lines) == 1, lines
    short = shlex.split(lines[0])
    plain = docker_runs()[0]

    def mounts(words: list[str]) -> set[str]:
        return {words[i + 1] for i, w in enumerate(words) if w == "-v"}

    assert short[short.index(IMAGE):] == plain[plain.index(IMAGE):]
    assert mounts(short) == mounts(plain) and "--gpus" in short
    assert "--cap-add" not in short and "--privileged" not in short


def test_tls_walkthrough_works_as_written(tmp_path: Path) -> None:
    openssl = require_tool("openssl")
    curl = require_tool("curl")
    block = shell_blocks(TLS.read_text())[0]
    host = socket.gethostname()
    cmds = commands(block)
    # 1. The certificate command, exactly as written.
    make_cert = next(c for c in cmds if c.startswith("openssl req"))
    res = subprocess.run(make_cert.replace("openssl", openssl, 1), shell=True, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    # 2. The web.yml of the heredoc, with a real hash where it says to paste one.
    web_yml = re.search(r"cat > web.yml <<'YAML'\n(.*?)\nYAML", block, re.S)
    assert web_yml
    password = "readme-password"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    config = tmp_path / "web.yml"
    config.write_text(re.sub(r"\$2b\$12\$\.\.\.paste the hash here\.\.\.", hashed,
                             web_yml.group(1)))
    assert hashed in config.read_text()
    # 3. The exporter on it, and the curl line (user:password given inline here).
    ctx = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
    ctx.check_hostname = False  # readiness only: the curl below checks the name
    with tls_exporter(config, ctx) as port:
        curl_cmd = next(c for c in cmds if c.startswith("curl"))
        words = shlex.split(curl_cmd.replace("$(hostname)", host))
        words = [curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                 "--resolve", f"{host}:{port}:127.0.0.1",
                 *[f"prometheus:{password}" if w == "prometheus" else
                   w.replace(":9445", f":{port}") for w in words[1:]]]
        res = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert res.stdout == "200", (words, res.stdout, res.stderr)

