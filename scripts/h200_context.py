"""Context length x attention backend on real SGLang 0.5.16 (one H200, the kshard stack), from the
committed captures only (``tests/fixtures/sglang-0.5.16/kshard-context/<mode>_<backend>/``).

Per (backend, mode, concurrency, context length) window: the measured prompt length (tokens, as
the server counted them: ``meta_info.prompt_tokens``), the device-timer ms per decode iteration
of the decode step (baseline), target-verify and draft (+ draft extend)
(:func:`lab.measure.crosscheck.window_server_timing`, DESIGN.md "Measurement definitions"), the
median per-request decode tok/s, the speedup over the same backend's baseline at the same point
(:meth:`lab.analysis.estimates.Ratio.welch` over the requests' decode tok/s: an interval within
one launch, requests as units), the measured accept length and the break-even accept length
(:func:`lab.analysis.theory.break_even_accept_length`: (verify + draft) / decode step). The draft
backend is SGLang 0.5.16's resolution (:func:`lab.engine.effective.draft_attention_backend`).

``python scripts/h200_context.py`` prints the markdown that
``docs/benchmarks/h200-sglang-0.5.16-context.md`` holds between its ``<!-- tables -->`` markers
(``tests/unit/test_h200_context.py`` checks they agree); ``--figure PATH`` also draws the figure
(verify ms and speedup against context length, one line per backend and mode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.analysis.estimates import Ratio  # noqa: E402
from lab.analysis.theory import break_even_accept_length  # noqa: E402
from lab.engine.effective import draft_attention_backend, effective_config  # noqa: E402
from lab.measure.records import request_metrics  # noqa: E402
from lab.measure.request_record import RequestRecord  # noqa: E402

CAP = ROOT / "tests" / "fixtures" / "sglang-0.5.16" / "kshard-context"
BACKENDS = ("triton", "flashinfer")
MODES = ("baseline", "eagle3_prefill", "eagle3_decode")
SCOPE = "within one launch"


def _key(c: int, ctx: int) -> str:
    return f"c{c}" if not ctx else f"c{c}_ctx{ctx}"


def load() -> list[dict]:
    """One row per (backend, mode, concurrency, context) window of the captures."""
    rows = []
    for backend in BACKENDS:
        tok_s: dict[tuple[str, str], list[float]] = {}
        for mode in MODES:
            d = CAP / f"{mode}_{backend}"
            win = json.loads((d / "window.json").read_text())
            eff = effective_config(json.loads((d / "server_info.after.json").read_text()),
                                   (d / "server.log").read_text(errors="replace"))
            recs = [RequestRecord.from_json(json.loads(x)) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
            for key, w in win.items():
                c, ctx = int(w["concurrency"]), int(w.get("context_tokens") or 0)
                mine = [r for r in recs if not r.warmup and r.concurrency == c and (r.context_tokens or 0) == ctx]
                tok_s[(mode, key)] = [m for m in (request_metrics(r).decode_tok_s for r in mine) if m]
                rows.append({"backend": backend, "mode": mode, "concurrency": c, "context_tokens": ctx, "key": key,
                             "prompt_tokens": statistics.mean(r.prompt_tokens for r in mine),
                             "requests": len(mine), "decode_ms": w.get("decode_ms"), "verify_ms": w.get("verify_ms"),
                             "draft_ms": w.get("draft_ms"), "decode_tok_s": w.get("decode_tok_s"),
                             "accept_length": w.get("accept_length"),
                             "verify_backend": eff.get("verify_attention_backend"),
                             "draft_backend": draft_attention_backend(eff)})
        for r in rows:
            if r["backend"] != backend or r["mode"] == "baseline":
                continue
            base = next(b for b in rows if b["backend"] == backend and b["mode"] == "baseline" and b["key"] == r["key"])
            r["speedup"] = Ratio.welch(tok_s[("baseline", r["key"])], tok_s[(r["mode"], r["key"])], scope=SCOPE,
                                       unit="request")
            r["break_even_accept_length"] = break_even_accept_length(base["decode_ms"], r["draft_ms"], r["verify_ms"])
            r["baseline_decode_ms"] = base["decode_ms"]
    return rows


def _f(v, nd=1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def tables(rows: list[dict]) -> list[str]:
    """The markdown tables: one per concurrency, rows by backend, context and mode."""
    out = []
    for c in sorted({r["concurrency"] for r in rows}):
        out += [f"**Concurrency {c}** (device-timer ms per decode iteration; speedup over the same backend's baseline "
                f"at the same context, 95 % interval {SCOPE}, requests as units)", "",
                "| backend | context (prompt tokens) | mode | verify / draft backend | decode step ms | verify ms | "
                "draft ms | decode tok/s | accept length | break-even accept length | speedup |",
                "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in sorted((r for r in rows if r["concurrency"] == c),
                        key=lambda r: (BACKENDS.index(r["backend"]), r["context_tokens"], MODES.index(r["mode"]))):
            ctx = f"{r['context_tokens']} ({r['prompt_tokens']:.0f})" if r["context_tokens"] else f"prompts as they are ({r['prompt_tokens']:.0f})"
            spec = r["mode"] != "baseline"
            out.append(f"| {r['backend']} | {ctx} | {r['mode']} | "
                       f"{(r['verify_backend'] + ' / ' + r['draft_backend']) if spec else '-'} | "
                       f"{_f(r['decode_ms'], 2)} | {_f(r['verify_ms'], 2)} | {_f(r['draft_ms'], 2)} | "
                       f"{_f(r['decode_tok_s'])} | {_f(r['accept_length'], 2)} | "
                       f"{_f(r.get('break_even_accept_length'), 2)} | "
                       f"{r['speedup'].text(scope=False) if spec else 'reference'} |")
        out.append("")
    return out


def crossover(rows: list[dict], backend: str, mode: str, c: int) -> dict | None:
    """Where ``mode`` on ``backend`` at concurrency ``c`` stops being faster along the context axis.

    ``faster_to`` / ``slower_from``: the longest measured context whose speedup interval lies above 1
    and the shortest after it whose interval lies below 1 (prompt tokens, the server's count);
    ``estimate``: the context where the break-even accept length, interpolated linearly between those
    two lengths (verify, draft and decode step are close to linear in context on these captures),
    equals the accept length measured there (their mean). None when the verdict does not flip."""
    rs = sorted((r for r in rows if (r["backend"], r["mode"], r["concurrency"]) == (backend, mode, c)),
                key=lambda r: r["prompt_tokens"])
    for lo, hi in zip(rs, rs[1:]):
        if (lo["speedup"].ci95_lo or 0) > 1 and (hi["speedup"].ci95_hi or 2) < 1:
            al = (lo["accept_length"] + hi["accept_length"]) / 2
            x0, x1 = lo["prompt_tokens"], hi["prompt_tokens"]
            b0, b1 = lo["break_even_accept_length"], hi["break_even_accept_length"]
            return {"faster_to": lo, "slower_from": hi, "accept_length": al,
                    "estimate": x0 + (al - b0) * (x1 - x0) / (b1 - b0)}
    return None


def crossover_lines(rows: list[dict]) -> list[str]:
    """One line per (backend, mode, concurrency): where the verdict flips, or that it does not."""
    out = []
    for c in sorted({r["concurrency"] for r in rows}):
        for backend in BACKENDS:
            for mode in MODES[1:]:
                x = crossover(rows, backend, mode, c)
                rs = [r for r in rows if (r["backend"], r["mode"], r["concurrency"]) == (backend, mode, c)]
                if x is None:
                    words = sorted({r["speedup"].text(scope=False).split()[-1] for r in rs})
                    span = f"{min(r['prompt_tokens'] for r in rs):.0f}-{max(r['prompt_tokens'] for r in rs):.0f}"
                    out.append(f"- c{c} {backend} {mode}: no crossover measured: {'/'.join(words)} at every context "
                               f"from {span} tokens")
                    continue
                lo, hi = x["faster_to"], x["slower_from"]
                out.append(f"- c{c} {backend} {mode}: faster up to about {x['estimate']:.0f} tokens of context "
                           f"(measured {lo['speedup'].text(scope=False)} at {lo['prompt_tokens']:.0f}, "
                           f"{hi['speedup'].text(scope=False)} at {hi['prompt_tokens']:.0f}; interpolated at the "
                           f"measured accept length {x['accept_length']:.2f})")
    return out + [""]


def figure(rows: list[dict], path: Path) -> None:
    """Verify ms (and the baseline's decode step) and speedup against context length at concurrency 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c1 = [r for r in rows if r["concurrency"] == 1]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = {"triton": "tab:red", "flashinfer": "tab:blue"}
    styles = {"eagle3_prefill": "-", "eagle3_decode": "--"}
    for backend in BACKENDS:
        base = sorted((r for r in c1 if r["backend"] == backend and r["mode"] == "baseline"), key=lambda r: r["prompt_tokens"])
        a.plot([r["prompt_tokens"] for r in base], [r["decode_ms"] for r in base], ":", marker="s", color=colors[backend],
               label=f"{backend} baseline decode step")
        for mode, ls in styles.items():
            rs = sorted((r for r in c1 if r["backend"] == backend and r["mode"] == mode), key=lambda r: r["prompt_tokens"])
            x = [r["prompt_tokens"] for r in rs]
            a.plot(x, [r["verify_ms"] for r in rs], ls, marker="o", color=colors[backend], label=f"{backend} {mode} verify")
            s = [r["speedup"] for r in rs]
            b.errorbar(x, [q.ratio for q in s], yerr=[[q.ratio - (q.ci95_lo or q.ratio) for q in s],
                                                       [(q.ci95_hi or q.ratio) - q.ratio for q in s]],
                       fmt=ls + "o", color=colors[backend], capsize=3, label=f"{backend} {mode}")
    a.set(xlabel="context (prompt tokens, server's count)", ylabel="ms per decode iteration (device timer)",
          title="Target-verify vs decode step")
    b.axhline(1.0, color="grey", lw=0.8)
    b.set(xlabel="context (prompt tokens, server's count)", ylabel="speedup over the same backend's baseline",
          title=f"EAGLE-3 speedup, 95 % interval {SCOPE}")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.suptitle("Real SGLang 0.5.16, one H200, kshard (Kimi-K2.5 per-GPU share at TP 8), random weights, "
                 "simulated accept length 1.85, concurrency 1", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--figure", type=Path, default=None, help="also draw the figure here (PNG)")
    a = ap.parse_args(argv)
    rows = load()
    print("\n".join(tables(rows) + ["**Where the verdict flips** (`crossover` in this script)", ""]
                    + crossover_lines(rows)))
    if a.figure:
        figure(rows, a.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
