"""The emulator's surfaces against a real SGLang 0.5.16 server's (component test).

``lab capture`` (:func:`lab.pipeline.capture.capture_mode`, the code that recorded
``tests/fixtures/sglang-0.5.16/``) is run against the emulator with the same preset
(``configs/h200/params-tiny.yaml``, ``engine: emulator``, the quick ``fast`` profile) in a
baseline and an EAGLE-3 mode. Its files are then compared with the real captures of the same
modes: metric names and label keys of the series the lab reads, "Decode batch" / "Prefill batch"
line shapes (through the lab's own parser), startup and capture lines, ``meta_info`` keys, the
``/server_info`` fields the lab reads, and the lab's readout (``window.json``).

The emulator serves SGLang 0.5.23's surfaces. Where 0.5.23 and 0.5.16 legitimately differ, the
test names the difference and asserts it, rather than skipping:

- the target capture's ``bs=[...]``: 0.5.23 on the *end* line, 0.5.16 on the *begin* line;
- the device-timer suffix: 0.5.23 ``fwd occupancy: X%, fwd+idle occupancy: Y%``, 0.5.16
  ``fwd occupancy: X%``;
- ``sglang:prompt_tokens_total`` / ``generation_tokens_total``: 0.5.23 adds ``is_streaming``;
- ``meta_info``: 0.5.16's backward-compatibility aliases (``spec_accepted_drafts``,
  ``spec_proposed_drafts``, ``spec_accept_histogram``) are gone in 0.5.23;
- ``cuda_graph_config.decode``: 0.5.23 has more keys (``max_context_size``, ...);
- the readiness probe: 0.5.23 serves ``/ready``, 0.5.16 does not.

And what the emulator does not model at all (the lab reads none of it, which the test checks
against the lab's source): request time-stamps in ``meta_info``, ``cached_tokens_details`` /
``dp_rank``, most of SGLang's ~80 metric families, and all but a few ``/server_info`` fields.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lab.config import load_params
from lab.pipeline.capture import capture_mode
from lab.engine.effective import EFFECTIVE_KEYS, effective_config
from lab.engine.ports import free_port
from lab.engine.startup import parse_startup_line
from lab.engine.surfaces import captured_graph_bs, surface_for
from lab.measure.client import StreamParser
from lab.measure.decode_log import DECODE_LOG_FIELDS, parse_decode_log
from lab.measure.prometheus import CUDA_GRAPH_PASSES, FORWARD_SECONDS, server_timing
from lab.measure.server_info import step_time_ms

ROOT = Path(__file__).resolve().parents[2]
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16" / "tiny"
MODES = ("baseline", "eagle3_decode")

#: Keys of a real 0.5.16 ``meta_info`` the emulator does not emit, and why that is allowed.
NOT_EMULATED_META = {
    # request time stamps (observability/req_time_stats.py convert_to_output_meta_info; tokenizer_manager)
    "request_received_ts", "api_server_dispatch_finish_ts", "request_finished_ts", "response_sent_to_client_ts",
    "decode_throughput", "queue_time",
    # prefix-cache breakdown and data-parallel rank
    "cached_tokens_details", "dp_rank",
}
#: 0.5.16's aliases, marked "FIXME: backward-compat aliases, remove in next release" there.
ALIASES_0516 = {"spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_histogram"}
#: ``/server_info`` fields the lab reads besides :data:`EFFECTIVE_KEYS`.
SERVER_INFO_READ = {"version", "cuda_graph_config", "internal_states", "decode_log_interval"}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("emulated-capture")
    p = load_params(ROOT / "configs" / "h200" / "params-tiny.yaml").model_copy(deep=True)
    p.engine = "emulator"
    p.server.port = free_port()
    p.server.startup_timeout_s = 60
    p.server.stop_grace_s = 2.0
    p.emulator.profile = "fast"
    p.emulator.startup_delay_s = 0.05
    for mode in MODES:
        capture_mode(p, mode, out / mode, requests=3, concurrency=(1,), log=lambda *_: None)
    return out


def _both(emulated: Path, mode: str, name: str) -> tuple[str, str]:
    return (emulated / mode / name).read_text(), (REAL / mode / name).read_text()


def _label_keys(text: str) -> dict[str, set[tuple[str, ...]]]:
    out: dict[str, set[tuple[str, ...]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, set()).add(tuple(sorted(s.labels)))
    return out


def _label_values(text: str, name: str, key: str) -> set[str]:
    return {s.labels[key] for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == name and key in s.labels}


# --------------------------------------------------------------------------- /metrics


@pytest.mark.parametrize("mode", MODES)
def test_metrics_the_lab_reads_have_sglangs_names_labels_and_values(emulated, mode):
    emu, real = _both(emulated, mode, "metrics.after.txt")
    ek, rk = _label_keys(emu), _label_keys(real)
    assert set(ek) <= set(rk), f"names a real 0.5.16 server does not serve: {set(ek) - set(rk)}"
    assert not any(n.endswith("_created") for n in ek)  # SGLang's multiprocess exposition has none
    for name in (FORWARD_SECONDS, CUDA_GRAPH_PASSES):
        assert ek[name] == rk[name], (name, ek[name], rk[name])
        for key in ("engine_type", "tp_rank", "pp_rank", "moe_ep_rank"):
            assert _label_values(emu, name, key) == _label_values(real, name, key), (name, key)
    # only the categories and pass modes that ran, as in the real server
    assert _label_values(emu, FORWARD_SECONDS, "category") == _label_values(real, FORWARD_SECONDS, "category")
    assert _label_values(emu, CUDA_GRAPH_PASSES, "mode") == _label_values(real, CUDA_GRAPH_PASSES, "mode")
    for name in set(ek) & set(rk) - {FORWARD_SECONDS, CUDA_GRAPH_PASSES}:
        if name in ("sglang:prompt_tokens_total", "sglang:generation_tokens_total"):
            # named difference: 0.5.23's TokenizerMetricsCollector adds is_streaming
            assert {tuple(sorted(set(k) - {"is_streaming"})) for k in ek[name]} == rk[name], name
            assert all("is_streaming" in k for k in ek[name]) and not any("is_streaming" in k for k in rk[name])
        else:
            assert ek[name] == rk[name], (name, ek[name], rk[name])


@pytest.mark.parametrize("mode", MODES)
def test_server_timing_reads_both_alike(emulated, mode):
    (eb, rb), (ea, ra) = _both(emulated, mode, "metrics.before.txt"), _both(emulated, mode, "metrics.after.txt")
    e, r = server_timing(eb, ea), server_timing(rb, ra)
    for key in ("verify_ms", "draft_ms", "decode_ms", "gpu_cycle_ms", "verify_share"):
        assert (e[key] is None) == (r[key] is None), key
    assert e["verify_graph_fraction"] == r["verify_graph_fraction"] == 1.0
    assert e["draft_incomplete"] is r["draft_incomplete"] is False
    assert set(e["deltas"]["forward_s"]) == set(r["deltas"]["forward_s"])


# --------------------------------------------------------------------------- server.log

_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")  # TP 1: no " TP0" (managers/scheduler.py)


def _skeleton(line: str) -> str:
    return re.sub(r"-?\d+(?:\.\d+)?|nan", "N", _PREFIX.sub("", line))


def _batch_lines(text: str, head: str) -> list[str]:
    return [ln for ln in text.splitlines() if head in ln]


@pytest.mark.parametrize("mode", MODES)
def test_batch_lines_have_the_real_shape(emulated, mode):
    emu, real = _both(emulated, mode, "server.log")
    for head in ("Decode batch", "Prefill batch"):
        e_lines, r_lines = _batch_lines(emu, head), _batch_lines(real, head)
        assert e_lines and r_lines, head
        assert all(_PREFIX.match(ln) for ln in e_lines + r_lines), head
        e_shapes, r_shapes = {_skeleton(ln) for ln in e_lines}, {_skeleton(ln) for ln in r_lines}
        # named difference: 0.5.23's device-timer suffix adds ", fwd+idle occupancy: X%"
        assert {s.replace(", fwd+idle occupancy: N%", "") for s in e_shapes} <= r_shapes, (head, e_shapes, r_shapes)
        assert all(s.endswith(", fwd+idle occupancy: N%") for s in e_shapes)
        assert not any("fwd+idle" in s for s in r_shapes)
    e_rows, r_rows = parse_decode_log(emu), parse_decode_log(real)
    assert len(e_rows) == len(_batch_lines(emu, "Decode batch"))  # the lab's parser reads every line
    for rows in (e_rows, r_rows):
        filled = {f for f in DECODE_LOG_FIELDS if all(r[f] is not None for r in rows)}
        expect = set(DECODE_LOG_FIELDS) - (set() if mode != "baseline" else {"accept_len", "accept_rate"})
        assert filled == expect, (mode, filled)
        assert all(r["tp_rank"] is None and r["cuda_graph"] is True for r in rows)
    assert {k for r in e_rows for k in r["extra"]} == {"fwd occupancy", "fwd+idle occupancy"}
    assert {k for r in r_rows for k in r["extra"]} == {"fwd occupancy"}
    # one Decode batch line and one step_time_dict entry per --decode-log-interval, in both
    for folder in (emulated / mode, REAL / mode):
        info_b = json.loads((folder / "server_info.before.json").read_text())
        info_a = json.loads((folder / "server_info.after.json").read_text())
        steps = step_time_ms(info_b, info_a)
        n_lines = len(parse_decode_log((folder / "server.log").read_text()))
        before_lines = sum(len(v) for v in (info_b["internal_states"][0]["step_time_dict"] or {}).values())
        assert sum(len(v) for v in steps.values()) + before_lines == n_lines, folder


@pytest.mark.parametrize("mode", MODES)
def test_startup_and_capture_lines(emulated, mode):
    emu, real = _both(emulated, mode, "server.log")

    def boundaries(text):
        return [(ev[0], ev[1].get("what")) for ln in text.splitlines()
                if (ev := parse_startup_line(ln)) is not None and ev[0] not in ("shards", "capturing")]

    assert boundaries(emu) == boundaries(real)  # weight loads (target, draft), each capture, ready
    info_e = json.loads((emulated / mode / "server_info.after.json").read_text())
    info_r = json.loads((REAL / mode / "server_info.after.json").read_text())
    assert captured_graph_bs(emu) == captured_graph_bs(real) == info_e["cuda_graph_config"]["decode"]["bs"] \
        == info_r["cuda_graph_config"]["decode"]["bs"]
    target = "target decode" if mode == "baseline" else "target verify"

    def target_lines(text):
        return [ln for ln in text.splitlines() if f"Capture {target} CUDA graph" in ln]

    (e_begin, e_end), (r_begin, r_end) = target_lines(emu), target_lines(real)
    # named difference (lab/engine/surfaces.py): 0.5.23 logs bs=[...] on the end line, 0.5.16 on the begin line
    assert "bs=[" in e_end and "bs=[" not in e_begin
    assert "bs=[" in r_begin and "bs=[" not in r_end
    assert surface_for("0.5.23")[0].capture_bs_line == "end" and surface_for("0.5.16")[0].capture_bs_line == "begin"
    e_launch = json.loads((emulated / mode / "launch.json").read_text())["startup"]
    r_launch = json.loads((REAL / mode / "launch.json").read_text())["startup"]
    assert e_launch["captures"] == r_launch["captures"]
    assert set(e_launch["phases"]) == set(r_launch["phases"])


# --------------------------------------------------------------------------- /generate


def _stream_chunks(path: Path) -> list[dict]:
    return [json.loads(ln[6:]) for ln in path.read_text().splitlines() if ln.startswith("data: {")]


def test_meta_info_keys(emulated, sglang_nodeps, sglang_nodeps_0516):
    lab_src = "\n".join(p.read_text() for p in (ROOT / "lab").rglob("*.py") if "emulator" not in p.parts)
    for key in NOT_EMULATED_META | ALIASES_0516:  # what the emulator may leave out, the lab must not read
        read = re.search(rf'meta\w*(?:\.get\(|\[)\s*"{key}"|\["meta_info"\]\["{key}"\]', lab_src)
        assert read is None, f"the lab reads meta_info[{key!r}] ({read.group(0)}): the emulator must emit it"
    assert re.search(r'meta\w*(?:\.get\(|\[)\s*"spec_verify_ct"', lab_src)  # teeth: a key the lab reads is found
    tm23 = (sglang_nodeps / "sglang/srt/managers/tokenizer_manager.py").read_text()
    tm16 = (sglang_nodeps_0516 / "sglang/srt/managers/tokenizer_manager.py").read_text()
    for key in ALIASES_0516:  # the named difference, in each version's own code
        assert f'meta_info["{key}"]' in tm16 and f'meta_info["{key}"]' not in tm23, key
    for mode in MODES:
        e = json.loads((emulated / mode / "generate.json").read_text())
        r = json.loads((REAL / mode / "generate.json").read_text())
        assert set(e) == set(r) == {"text", "output_ids", "meta_info"}
        ek, rk = set(e["meta_info"]), set(r["meta_info"])
        assert ek <= rk, ek - rk
        allowed = NOT_EMULATED_META | (ALIASES_0516 if mode != "baseline" else set())
        assert rk - ek <= allowed, rk - ek - allowed
        assert {"completion_tokens", "prompt_tokens", "finish_reason", "e2e_latency"} <= ek
        assert ("spec_verify_ct" in ek) is (mode != "baseline")
        assert e["meta_info"]["finish_reason"] == r["meta_info"]["finish_reason"]
        # streams: the same chunk shape, and only the last chunk carries e2e_latency and spec_* fields
        ec, rc = _stream_chunks(emulated / mode / "generate.stream.txt"), _stream_chunks(REAL / mode / "generate.stream.txt")
        assert {tuple(sorted(c)) for c in ec} == {tuple(sorted(c)) for c in rc} == {("meta_info", "output_ids", "text")}
        for chunks in (ec, rc):
            assert all("e2e_latency" not in c["meta_info"] and "spec_verify_ct" not in c["meta_info"]
                       for c in chunks[:-1])
            assert "e2e_latency" in chunks[-1]["meta_info"]
        assert set().union(*(set(c["meta_info"]) for c in ec[:-1])) <= set().union(*(set(c["meta_info"]) for c in rc[:-1]))


@pytest.mark.parametrize("mode", MODES)
def test_stream_structure_through_the_client_parser(emulated, mode):
    """One chunk for the prefill token and one per decode iteration (verify cycle), in both."""
    for path in (emulated / mode / "generate.stream.txt", REAL / mode / "generate.stream.txt"):
        sp = StreamParser()
        for i, ln in enumerate(path.read_bytes().splitlines(keepends=True)):
            if not sp.feed(float(i), ln):
                break
        assert sp.done and sp.error is None and sum(n for _, n in sp.chunks) == sp.meta["completion_tokens"]
        assert sp.output_ids() is not None
        steps = sp.meta.get("spec_verify_ct", sp.meta["completion_tokens"] - 1)
        assert len(sp.chunks) == steps + 1, path


# --------------------------------------------------------------------------- /server_info and readout


@pytest.mark.parametrize("mode", MODES)
def test_server_info_fields_the_lab_reads(emulated, mode):
    e = json.loads((emulated / mode / "server_info.after.json").read_text())
    r = json.loads((REAL / mode / "server_info.after.json").read_text())
    for info in (e, r):
        assert set(EFFECTIVE_KEYS) | SERVER_INFO_READ <= set(info), set(EFFECTIVE_KEYS) | SERVER_INFO_READ - set(info)
    ed, rd = e["cuda_graph_config"]["decode"], r["cuda_graph_config"]["decode"]
    assert set(rd) <= set(ed)  # named difference: 0.5.23 adds max_context_size, max_seq_len, ...
    assert set(ed) - set(rd) == {"max_context_size", "full_prefill_prefix_chunk_tokens", "max_seq_len"}
    for key in ("backend", "max_bs", "bs"):
        assert ed[key] == rd[key], key
    es, rs = e["internal_states"][0], r["internal_states"][0]
    for st in (es, rs):
        assert isinstance(st["step_time_dict"], dict) and st["effective_max_running_requests_per_dp"] == 8
        assert ("avg_spec_accept_length" in st) is (mode != "baseline")
    ee, re_ = effective_config(e, (emulated / mode / "server.log").read_text()), effective_config(
        r, (REAL / mode / "server.log").read_text())
    diff = {k for k in ee if ee[k] != re_[k]}
    # which build each is: the emulator names its modelled build and gets no SGLang contract
    assert diff == {"engine_version", "modelled_build", "sglang_contract"}, {k: (ee[k], re_[k]) for k in diff}
    assert re_["sglang_contract"] == "0.5.16" and ee["sglang_contract"] is None and ee["modelled_build"]


#: window keys ``lab capture`` writes that the kshard/tiny captures predate (recorded before b763bdb)
NEWER_WINDOW_KEYS = {"context_tokens"}
#: per-request keys of the same kind (``lab/pipeline/capture.py`` adds both to every record)
NEWER_RECORD_KEYS = {"context_tokens", "counted_prompt_tokens"}


@pytest.mark.parametrize("mode", MODES)
def test_the_lab_readout_has_the_same_shape(emulated, mode):
    """``window.json`` and ``requests.jsonl``: the same keys from the emulator as from the real server."""
    e = json.loads((emulated / mode / "window.json").read_text())["c1"]
    r = json.loads((REAL / mode / "window.json").read_text())["c1"]
    # the capture checks only the keys it recorded: keys the lab added after it was recorded
    # (the context length, b763bdb) are the emulator's extra, nothing else
    assert set(r) <= set(e), set(r) - set(e)
    assert set(e) - set(r) <= NEWER_WINDOW_KEYS, set(e) - set(r) - NEWER_WINDOW_KEYS
    assert set(e["server"]) == set(r["server"])
    for key in ("verify_ms", "draft_ms", "decode_ms", "accept_length", "server_step_ms"):
        assert (e[key] is None) == (r[key] is None), key
    assert e["server"]["log_decode_lines"] > 0 and r["server"]["log_decode_lines"] > 0
    e_rec = json.loads((emulated / mode / "requests.jsonl").read_text().splitlines()[0])
    r_rec = json.loads((REAL / mode / "requests.jsonl").read_text().splitlines()[0])
    assert set(r_rec) <= set(e_rec), set(r_rec) - set(e_rec)
    assert set(e_rec) - set(r_rec) <= NEWER_RECORD_KEYS, set(e_rec) - set(r_rec) - NEWER_RECORD_KEYS


def _overshoots(folder: Path) -> list[int]:
    """Per streamed request of a capture: ``1 + spec_verify_ct + spec_num_correct_drafts -
    completion_tokens``, how far the last cycle's accepted run went past ``max_new_tokens``."""
    recs = [json.loads(ln) for ln in (folder / "requests.jsonl").read_text().splitlines()]
    out = []
    for r in recs:
        m = r["meta_info"]
        hist = m["spec_correct_drafts_histogram"]
        assert sum(hist) == m["spec_verify_ct"] and sum(k * c for k, c in enumerate(hist)) == m["spec_num_correct_drafts"]
        out.append(1 + m["spec_verify_ct"] + m["spec_num_correct_drafts"] - r["completion_tokens"])
    return out


def test_acceptance_counts_the_last_cycles_whole_run_as_sglang_does(emulated):
    """SGLang counts a verify's whole accepted run in ``spec_num_correct_drafts`` and the
    histogram, then cuts the output at ``max_new_tokens``; the emulator does the same (its exact
    count on a pinned run: tests/unit/test_emulator.py)."""
    real, emu = _overshoots(REAL / "eagle3_decode"), _overshoots(emulated / "eagle3_decode")
    assert all(0 <= o < 3 for o in real + emu), (real, emu)  # num_draft_tokens 3
    assert any(o > 0 for o in real), real  # the real server's last runs went past the cap
