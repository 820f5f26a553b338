"""What a person sees of report.html fits a screen (issue 34, item 6), in headless Chromium.

Three emulator modes measured by the bench stage's code (lab.pipeline.bench.run_mode, a small
bench with both context lengths and an open-loop point, as params.yaml's default has) and the
compare stage's (lab.pipeline.compare.run_compare) write a real report.html; opened in a
1280 x 1000 window, before any scrolling: the verdict, each mode's configuration and the first
figure (the speedup's, loaded) are inside the window; the measurement warnings are folded in a
<details> below the figure; nothing is wider than the window. The server-side bars of the
emulated run are labelled modelled, never "server, GPU".
"""

from __future__ import annotations

import html

import pytest

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # Chromium, a pipeline run: the slow tier

WINDOW = (1280, 1000)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from lab.pipeline.bench import run_mode
    from lab.pipeline.compare import run_compare
    from reliability_util import small_params

    tmp = tmp_path_factory.mktemp("report")
    params = small_params(tmp, num_prompts=4, max_new_tokens=16, concurrency=[1, 4], repeats=3,
                          context_tokens=[0, 4096], request_rates=[4])
    modes = list(params.modes)
    assert modes == ["baseline", "eagle3_prefill", "eagle3_decode"]  # params.yaml's three
    for m in modes:
        run_mode(params, m, tmp / "results" / m, log=lambda s: None)
    summary = run_compare(params, modes, tmp / "results", tmp / "reports")
    return tmp / "reports" / "report.html", summary


def test_verdict_configuration_and_first_figure_fit_a_1280_by_1000_window(report):
    from browser import screen_report

    page, summary = report
    assert summary["warnings"], "no warning to fold: the test would prove nothing about them"
    s = screen_report(page, WINDOW)
    width, height = s["inner"]  # the page's viewport: the window less Chromium's own bars (857 px of 1000)
    assert width == WINDOW[0] and 0.8 * WINDOW[1] <= height <= WINDOW[1], s
    for part in ("verdict", "modes", "first_img"):
        top, bottom, right = s[part]
        assert 0 <= top < bottom <= height and right <= width, (part, s)
    assert s["verdict"][1] <= s["modes"][0] and s["modes"][1] <= s["first_img"][0], s  # in that order
    assert s["first_img_alt"] == "speedup" and s["first_img_loaded"], s
    assert s["scroll_width"] <= width, s
    # the warnings: folded as the page opens, under the first figure; unfolded they are much taller
    assert s["warnings_open"] is False, s
    assert s["warnings"][0] >= s["first_img"][1], s
    assert s["warnings_unfolded_height"] > s["warnings"][1] - s["warnings"][0], s


def test_the_top_names_each_modes_resolved_configuration_and_states_each_warning_once(report):
    page, summary = report
    text = page.read_text()
    top = text[:text.index("<h2>")]  # everything before the first section heading
    assert 'class="verdict"' in top and '<ul class="modes">' in top and '<details class="warnings">' in top
    assert "<b>baseline</b>: no speculation; attention " in top
    eff = summary["effective_config"]["eagle3_decode"]
    assert (f"<b>eagle3_decode</b>: EAGLE3, {eff['speculative_num_steps']} steps, topk {eff['speculative_eagle_topk']}, "
            f"{eff['speculative_num_draft_tokens']} draft tokens, decode-mode verify") in top
    assert "eagle3_prefill</b>: EAGLE3" in top and "prefill-mode verify" in top
    warning = next(iter(summary["warnings"].values()))[0]
    assert text.count(html.escape(warning[:40])) == 1, warning  # once: folded, not repeated below
    assert text.count("Measurement warnings") == 1


def test_an_emulated_bar_is_never_labelled_server_gpu(report):
    """The latency figure's legend of this emulated run (figures.latency_labels, as drawn)."""
    from lab.report import figures

    _, summary = report
    assert {p["timing"] for p in summary["provenance"].values()} == {"modelled"}
    labels = figures.latency_labels(summary)
    assert "GPU" not in " ".join(labels.values()) and labels["verify_ms"] == "verify (server, modelled by the emulator)"
