"""No value is cut without saying so (issue 21, item 5): a param over MLflow's 6,000
characters or a tag over its 8,000 goes in whole as an artifact, and the param or tag says
where (lab/tracking/runs.py ``long_value_marker``); the run record keeps it whole, so
``lab log`` replays it the same way."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH

from lab.pipeline.bench import run_mode
from lab.tracking.runs import RECORD_FILE, load_record
from lab.tracking.tracker import Tracker
from reliability_util import small_params


def _artifact(client: MlflowClient, run_id: str, path: str, tmp: Path) -> str:
    return Path(client.download_artifacts(run_id, path, str(tmp))).read_text()


def test_long_param_and_tag_go_in_whole_as_artifacts(tmp_path):
    params = small_params(tmp_path)
    run = Tracker.from_params(params).open_run("long", {}, nested=False, base=tmp_path)
    value = "x" * 100 + "".join(str(i % 10) for i in range(6_315))  # 6,415 characters
    note = "warning; " * 1_000  # 9,000 characters
    run.log_params({"server.extra_args": value, "short": "ok"})
    run.set_tags({"warnings": note})
    run.finish("FINISHED", save_to=tmp_path / RECORD_FILE)
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    got = client.get_run(run.run_id).data
    marker = got.params["server.extra_args"]
    assert len(value) > MAX_PARAM_VAL_LENGTH >= len(marker) and got.params["short"] == "ok"
    assert marker.startswith(value[:300]) and "cut by the lab: 6415 characters" in marker
    assert hashlib.sha256(value.encode()).hexdigest()[:12] in marker
    assert "full value in artifact long_values/params/server.extra_args.txt" in marker
    assert _artifact(client, run.run_id, "long_values/params/server.extra_args.txt", tmp_path / "a") == value
    tag = got.tags["warnings"]
    assert len(note) > MAX_TAG_VAL_LENGTH >= len(tag) and "long_values/tags/warnings.txt" in tag
    assert _artifact(client, run.run_id, "long_values/tags/warnings.txt", tmp_path / "b") == note
    rec = load_record(tmp_path / RECORD_FILE)
    assert rec["params"]["server.extra_args"] == value and rec["tags"]["warnings"] == note  # whole, for `lab log`


def test_a_mode_run_with_a_long_server_argument_and_env_value(tmp_path):
    """The issue's cases: a 6,415-character ``--json-model-override-args`` and a 6,760-character
    environment value, through a real mode run."""
    override = json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "pad": "p" * 6_340})
    env_value = "v" * 6_760
    params = small_params(tmp_path, num_prompts=2, concurrency=[1])
    params.server.extra_args = ["--json-model-override-args", override]
    params.server.env = {"LAB_LONG_SETTING": env_value}
    result = run_mode(params, "baseline", tmp_path / "baseline")
    client = MlflowClient(tracking_uri=params.mlflow.tracking_uri)
    logged = client.get_run(result["mlflow_run_id"]).data.params
    for key, full in (("server.extra_args", str(params.server.extra_args)), ("server.env.LAB_LONG_SETTING", env_value)):
        assert len(full) > MAX_PARAM_VAL_LENGTH and f"cut by the lab: {len(full)} characters" in logged[key], key
        path = f"long_values/params/{key}.txt"
        assert path in logged[key] and _artifact(client, result["mlflow_run_id"], path, tmp_path / key) == full
