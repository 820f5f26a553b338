"""A shared tracking server: `mlflow server` on a real PostgreSQL, the pipeline logging to it.

The harness starts a throwaway PostgreSQL 16 cluster from the locked ``pgserver`` wheel's
server binaries (``initdb`` + ``pg_ctl`` in a temp dir on a free loopback port; no system
PostgreSQL is used or needed; under root as the unprivileged ``nobody`` user, since
PostgreSQL refuses to run as root), then ``mlflow server`` on it, runs a small ``dvc repro``
whose ``mlflow.tracking_uri`` is the server, and reads the runs back over MLflow's REST API
with plain HTTP requests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from scratch import free_port as _free_port, run_dvc as _dvc, scratch_repo

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def pg_install() -> Path:
    """The ``pgserver`` wheel's PostgreSQL tree (``bin/``, ``lib/``, ``share/``), found without
    importing ``pgserver`` (its import sets up lock files); the test fails, naming the fix,
    when the package is missing."""
    spec = importlib.util.find_spec("pgserver")
    tree = Path(next(iter(spec.submodule_search_locations))) / "pginstall" if spec else None
    if tree is None or not (tree / "bin" / "initdb").is_file():
        pytest.fail("the pgserver package (PostgreSQL server binaries, dev dependency in pyproject.toml) is "
                    "missing. Fix: run README's test command, or .cache/uv/bin/uv sync --frozen")
    return tree


@pytest.fixture(scope="module")
def postgres_uri():
    """A fresh PostgreSQL cluster on 127.0.0.1:<free port> with database ``mlflow``; stopped after."""
    base = Path(tempfile.mkdtemp(prefix="lab-pg-"))  # not under pytest's 0700 root dir
    data, sock, log = base / "data", base / "sock", base / "server.log"
    sock.mkdir()
    bindir = pg_install() / "bin"
    user: dict = {}
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as nobody, from a copy it can read
        import pwd

        pw = pwd.getpwnam("nobody")
        site = bindir.parents[2]  # the binaries find libpq in ../../../pgserver.libs (their RPATH)
        for tree in ("pgserver/pginstall", "pgserver.libs"):
            shutil.copytree(site / tree, base / "pg" / tree, symlinks=True)
        bindir = base / "pg" / "pgserver" / "pginstall" / "bin"
        for d in (base, sock):
            os.chown(d, pw.pw_uid, pw.pw_gid)
        user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    port = _free_port()

    def run(*cmd: str, timeout: int = 120) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=base, **user)

    steps = [
        (str(bindir / "initdb"), "-D", str(data), "-U", "mlflow", "--auth=trust", "-E", "UTF8", "--no-sync"),
        (str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "90", "-o",
         f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off", "start"),
        (str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "mlflow", "mlflow"),
    ]
    for cmd in steps:
        proc = run(*cmd)
        if proc.returncode != 0:
            extra = log.read_text()[-2000:] if log.exists() else ""
            pytest.fail(f"PostgreSQL could not be started: {' '.join(cmd)} -> {proc.returncode}\n"
                        f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}{extra}")
    try:
        # psycopg2 named explicitly: SQLAlchemy 2.1's default PostgreSQL driver is psycopg 3
        yield f"postgresql+psycopg2://mlflow@127.0.0.1:{port}/mlflow"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback)
        return resp.read().decode()


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 (loopback)
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def mlflow_server(postgres_uri, tmp_path_factory):
    """``mlflow server`` on 127.0.0.1:<free port> with the PostgreSQL backend store."""
    port = _free_port()
    arts = tmp_path_factory.mktemp("mlartifacts")
    log = open(arts.parent / "mlflow-server.log", "w")
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", postgres_uri,
                             "--artifacts-destination", str(arts), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited ({proc.returncode}): {Path(log.name).read_text()[-3000:]}")
            try:
                if _get(url + "/health", 2).strip().upper().startswith("OK"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not ready in 180 s: {Path(log.name).read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        log.close()


def test_pipeline_runs_nest_under_a_parent_on_postgres(mlflow_server, postgres_uri, tmp_path):
    def edit(params):
        params["modes"] = {k: v for k, v in params["modes"].items() if k in ("baseline", "eagle3_decode")}
        params["bench"].update({"num_prompts": 2, "max_new_tokens": 16, "concurrency": [1],
                                "warmup_requests": 0, "repeats": 2})
        params["mlflow"] = {"tracking_uri": mlflow_server, "experiment": "pg-test"}

    repo = scratch_repo(tmp_path / "lab", edit)
    proc = _dvc(repo, "repro", "compare")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    api = mlflow_server + "/api/2.0/mlflow"
    exp = json.loads(_get(f"{api}/experiments/get-by-name?experiment_name=pg-test"))["experiment"]
    runs = _post(f"{api}/runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 100})["runs"]

    def tags(r):
        return {t["key"]: t["value"] for t in r["data"].get("tags", [])}

    def metrics(r):
        return {m["key"]: m["value"] for m in r["data"].get("metrics", [])}

    parents = [r for r in runs if tags(r).get("lab_role") == "pipeline"]
    assert len(parents) == 1, [r["info"]["run_name"] for r in runs]
    parent = parents[0]
    assert parent["info"]["status"] == "FINISHED"
    assert parent["info"]["run_name"].startswith("pipeline | emulator | 2 modes")
    assert metrics(parent)["eagle3_decode.c1.speedup_decode_tok_s"] > 0
    children = [r for r in runs if tags(r).get("mlflow.parentRunId") == parent["info"]["run_id"]]
    names = sorted(r["info"]["run_name"] for r in children)
    assert names[:3] == ["baseline | emulator | no speculation", "compare | emulator | 2 modes",
                         "eagle3_decode | emulator | EAGLE3 s2 k1 d3 decode"], names
    assert len(names) == 4 and names[3].startswith("physics | tp=1 | "), names  # "not run: ..." without CUDA
    for r in children:
        if tags(r).get("mode"):
            assert r["info"]["status"] == "FINISHED"
            assert metrics(r)["decode_tok_s"] > 0  # headline metrics side by side in the compare view
    compare = next(r for r in children if r["info"]["run_name"].startswith("compare"))
    arts = _get(f"{api}/artifacts/list?run_id={compare['info']['run_id']}")
    assert "report.html" in arts
    # the runs really live in PostgreSQL
    import psycopg2

    with psycopg2.connect(postgres_uri.replace("+psycopg2", "")) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from runs where experiment_id = %s", (int(exp["experiment_id"]),))
        assert cur.fetchone()[0] == len(runs)
