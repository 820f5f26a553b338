"""A third engine is one file and one registration line (issue 31 item 1): this file registers
``fakeeng`` (``@register("fakeeng")``, below) and nothing else in the lab changes; then the lab's
own paths run on it: ``lab command`` prints its argv, ``lab doctor`` / the preflight runs its
own rows plus every engine's, and the bench stage's body (``run_mode``: preflight,
environment capture, launch, the measured points, aggregation, MLflow tags) measures it,
judged by what the fake server says it sent. Not run here: the papermill notebook around
``run_mode`` and the compare stage.

The fake server is this same file run as a script (``python test_third_engine.py --port N``):
a tiny aiohttp app serving ``/ready``, ``/health``, ``/server_info`` and a streamed ``/generate``
in SGLang's chunk format (``data: {"text", "output_ids", "meta_info": {...}}`` then
``data: [DONE]``, as :class:`lab.measure.client.StreamParser` reads it), one token per chunk.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FAKE_VERSION = "0.0.1-fake"


def _serve(argv: list[str]) -> None:
    """The fake engine's server: ``--host``, ``--port``; any other flag is ignored."""
    import asyncio

    from aiohttp import web

    host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
    port = int(argv[argv.index("--port") + 1])

    async def ok(_req):
        return web.Response(text="ok")

    async def info(_req):
        return web.json_response({"version": FAKE_VERSION, "engine": "fakeeng"})

    truth = os.environ.get("FAKEENG_TRUTH")

    async def generate(req):
        body = await req.json()
        n = int(body.get("sampling_params", {}).get("max_new_tokens", 4))
        if truth:  # what this server did, for the test to judge the lab's measurement by
            with open(truth, "a") as f:
                f.write(json.dumps({"rid": body.get("rid"), "tokens": n}) + "\n")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        ids = []
        for i in range(n):
            ids.append(i + 1)
            meta = {"id": body.get("rid"), "prompt_tokens": len(str(body.get("text", "")).split()),
                    "completion_tokens": i + 1, "finish_reason": {"type": "length"} if i == n - 1 else None}
            chunk = {"text": " t" * (i + 1), "output_ids": list(ids), "meta_info": meta}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0.002)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/ready", ok)
    app.router.add_get("/health", ok)
    app.router.add_get("/server_info", info)
    app.router.add_get("/metrics", lambda _req: web.Response(text="# no metrics\n"))
    app.router.add_post("/generate", generate)
    print("fake engine serving", flush=True)
    web.run_app(app, host=host, port=port, print=None)


if __name__ == "__main__":
    _serve(sys.argv[1:])
    raise SystemExit(0)


import pytest  # noqa: E402

from lab.config import load_params  # noqa: E402
from lab.engine.registry import Engine, register  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRUTH: list[str] = []  # where the fake server writes what it sent (set by the stage test)


@register("fakeeng")  # the one registration line
class FakeEngine(Engine):
    """A measured engine without GPUs: this file's server, SGLang's flags (it ignores them)."""

    module = "unused: argv runs this file"
    picks_free_port = True

    def flags(self, mode_name, *, mode, model, server):
        from lab.engine.command import server_flags

        return server_flags(mode, model=model, server=server)

    def argv(self, mode_name, flags, *, python, own=None, ground_truth_file=None, prompt_file=None):
        return [python, str(Path(__file__).resolve()), *flags]

    def env(self, mode_name, *, mode, server):
        return {"FAKEENG_MODE": mode_name, **({"FAKEENG_TRUTH": TRUTH[0]} if TRUTH else {})}

    def preflight(self, modes, *, model, server, bench, own, python, timeout_s, check_argv):
        from lab.engine.preflight import OK, Check

        return [Check("fakeeng", OK, f"nothing to check for {len(modes)} mode(s)")]

    def prompt_counter(self):  # the fake server has no tokenizer: words count
        return lambda text: len(text.split())

    def version_tags(self, server_info, python=None):
        return {"fakeeng_version": str((server_info or {}).get("version", "unknown"))}


def _params(tmp_path):
    return load_params(ROOT / "params.yaml", overrides={"engine": "fakeeng"})


def test_lab_command_prints_the_third_engines_argv(capsys):
    from lab.cli import main as lab_main

    assert lab_main(["command", "--mode", "baseline", "--engine", "fakeeng"]) == 0
    line = capsys.readouterr().out.strip()
    assert "FAKEENG_MODE=baseline" in line and "test_third_engine.py --model-path" in line, line
    assert "--emulator-profile" not in line and "SGLANG_ENABLE_METRICS_DEVICE_TIMER" not in line, line


def test_preflight_runs_its_rows_and_every_engines(tmp_path, capsys):
    from lab.cli import main as lab_main
    from lab.engine.preflight import run_preflight

    report = run_preflight(_params(tmp_path), results_dir=tmp_path)
    names = [c.name for c in report.checks]
    assert report.engine == "fakeeng" and names[0] == "fakeeng" and {"port", "disk", "dataset"} <= set(names)
    assert "gpus" not in names and "sglang" not in names  # no SGLang row falls through to it
    port = next(c for c in report.checks if c.name == "port")
    assert "fakeeng takes a free port" in port.detail, port.detail
    assert lab_main(["doctor", "--engine", "fakeeng"]) in (0, 1)  # the table prints for it
    assert "fakeeng" in capsys.readouterr().out


@pytest.mark.integration
def test_bench_stage_measures_the_third_engine(tmp_path, monkeypatch):
    """``lab.pipeline.bench.run_mode`` (the bench stage's body: preflight, environment capture,
    launch, readiness, the measured points through the request function the engine names,
    aggregation, MLflow) on ``fakeeng``, judged by what its server says it sent."""
    from mlflow.tracking import MlflowClient

    from lab.measure import client
    from lab.pipeline.bench import run_mode
    from reliability_util import small_params

    truth = tmp_path / "sent.jsonl"
    monkeypatch.setattr(sys.modules[__name__], "TRUTH", [str(truth)])
    p = small_params(tmp_path, num_prompts=4, max_new_tokens=6, concurrency=[1, 2]).model_copy(
        update={"engine": "fakeeng"})
    assert client.request_function("fakeeng") is client.run_requests_sync  # the function it names
    out = tmp_path / "results" / "baseline"
    result = run_mode(p, "baseline", out)
    assert result["status"] == "ok" and result["engine"] == "fakeeng", result.get("error")
    assert result["provenance"] == {"engine": "fakeeng", "timing": "measured", "weights": "real", "acceptance": "n/a"}
    assert result["engine_version"] == FAKE_VERSION
    assert [c["name"] for c in result["preflight"]["checks"]][0] == "fakeeng"
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    sent = {r["rid"]: r["tokens"] for r in map(json.loads, truth.read_text().splitlines())}
    assert len(recs) == 8 and all(r["ok"] for r in recs)
    assert {r["rid"]: r["completion_tokens"] for r in recs} == {rid: n for rid, n in sent.items() if rid in
                                                                 {r["rid"] for r in recs}}
    assert all(len(r["chunks"]) == r["completion_tokens"] for r in recs)  # one chunk per token, all read
    assert result["headline"]["decode_tok_s"] > 0 and set(result["levels"]) == {"c1", "c2"}
    assert "not applicable: engine fakeeng" in (out / "environment" / "versions.json").read_text()
    tags = MlflowClient(tracking_uri=p.mlflow.tracking_uri).get_run(result["mlflow_run_id"]).data.tags
    assert tags.get("fakeeng_version") == FAKE_VERSION and tags.get("engine") == "fakeeng", tags
