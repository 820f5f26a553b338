"""Continuous-batching engine of the emulator, in a dedicated thread with precise timing.

Per iteration (SGLang's scheduler order): admit waiting requests up to
``max_running_requests``; if any were admitted run one prefill (extend) forward for them
(each gets its first token); otherwise run one decode step (1 token per running request)
or one speculative cycle (``eagle_draft`` -> ``target_verify`` -> ``eagle_draft_extend``;
each request gets its accept length, capped at its remaining ``max_new_tokens``).

Each phase sleeps to a deadline computed from the cost profile (``time.sleep`` to
``SPIN_S`` = 0.2 ms before, then a spin on ``perf_counter``). Back-to-back iterations
chain start = previous end; the profile's scheduler-overhead phase covers the token
accounting between iterations, and the forward phases then run for their planned
durations with deadlines cumulative from the end of that phase (an OS delay in one forward
phase is absorbed by the next). The previous iteration's ground-truth line, metrics, log
lines and chunks are emitted at the start of the next iteration's first forward phase (or
at once when the engine goes idle), so they do not delay the schedule; chunks go to the
event loop through one ``deliver`` callback per iteration (the HTTP layer passes one that
uses ``loop.call_soon_threadsafe``) and leave the engine ~0.1-0.2 ms after the iteration end.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import threading
import time
from typing import Callable

from lab.emulator.acceptance import AcceptanceModel
from lab.emulator.args import ServerArgs
from lab.emulator.metrics import EmulatorMetrics
from lab.emulator.profile import CostProfile
from lab.emulator.request import VOCAB, Request
from lab.emulator.sglog import decode_batch_line, prefill_batch_line
from lab.emulator.truth import TruthWriter

__all__ = ["Engine", "Request", "wait_until", "VOCAB", "draft_extend_graph_disabled"]

ENGINE_NICE = -10  # engine thread priority (best effort), for timing on a shared machine
SPIN_S = 0.0002  # sleep until this close to a deadline, then spin (Linux sleep overshoot ~60 us)

def wait_until(deadline: float) -> None:
    """Block until ``time.perf_counter() >= deadline`` (sleep, then spin the last ``SPIN_S``)."""
    while True:
        rem = deadline - time.perf_counter()
        if rem <= 0:
            return
        if rem > SPIN_S:
            time.sleep(rem - SPIN_S)


def _merge(phases: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Phases in order, with a category's seconds summed if it repeats (one booking per category)."""
    out: dict[str, float] = {}
    for cat, sec in phases:
        out[cat] = out.get(cat, 0.0) + sec
    return list(out.items())


def draft_extend_graph_disabled() -> bool:
    """SGLang's ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH``: draft-extend runs eagerly (booked as
    "extend", and not captured at startup) even when CUDA graphs are on."""
    return os.environ.get("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", "").lower() in ("1", "true", "yes")


class Engine:
    """The scheduler + fake model runner.

    :param args: resolved server args. :param profile: cost profile.
    :param deliver: called from the engine thread once per iteration with
        ``[(request, event_dict), ...]``; must not block.
    :param simulate_acc_len: ``SGLANG_SIMULATE_ACC_LEN`` (None/<=0: off).
    :param record_step_time: ``SGLANG_RECORD_STEP_TIME`` (fills :attr:`step_time_dict`).
    :param on_death: called from the engine thread with the exception that ended it (a full disk's
        ``OSError`` ENOSPC from the ground-truth file, a bug): SGLang's scheduler dying makes its
        whole server exit (the launcher's SIGQUIT handler, ``kill_process_tree``), so the
        emulator's HTTP server must not keep answering while nothing serves its requests.
    """

    def __init__(self, args: ServerArgs, profile: CostProfile, *, deliver: Callable[[list[tuple[Request, dict]]], None],
                 metrics: EmulatorMetrics, truth: TruthWriter, log: logging.Logger,
                 simulate_acc_len: float | None = None, record_step_time: bool = False,
                 on_death: Callable[[BaseException], None] | None = None) -> None:
        self.args, self.profile, self.deliver = args, profile, deliver
        self.on_death = on_death  # the server's exit (lab/emulator/__main__.py): SGLang's sigquit handler
        self.metrics, self.truth, self.log = metrics, truth, log
        self.rng = random.Random(args.random_seed)
        self.accept = None
        self._accept_by_category: dict[str, AcceptanceModel] = {}  # profile acceptance.per_category
        if args.is_speculative:
            def model(p: float) -> AcceptanceModel:
                return AcceptanceModel(p, args.speculative_num_steps or 1, args.speculative_eagle_topk or 1,
                                       args.speculative_num_draft_tokens or 2, simulate_acc_len, self.rng)

            self.accept = model(profile.p_accept)
            self._accept_by_category = {c: model(n.value) for c, n in profile.acceptance.per_category.items()}
        self.adaptive = None  # --speculative-adaptive: the num_steps tier per iteration (lab/emulator/adaptive.py)
        self._accept_at_steps: dict[tuple[str | None, int], AcceptanceModel] = {}
        self._steps_pending: collections.deque[tuple[int, dict[str, int]]] = collections.deque()
        self._last_steps = args.speculative_num_steps or 1
        if args.is_speculative and args.speculative_adaptive:
            from lab.emulator.adaptive import AdaptiveSteps

            self.adaptive = AdaptiveSteps(args.speculative_num_steps or 1, args.speculative_adaptive_config,
                                          cuda_graph_bs=sorted(args.decode_graph_bs) or None, log=log.info)
        self.record_step_time = record_step_time
        self.graph_bs = sorted(args.decode_graph_bs)  # a batch up to the largest replays a (padded) graph
        self.disable_draft_extend_graph = draft_extend_graph_disabled()
        self.step_time_dict: dict[int, list[float]] = collections.defaultdict(list)
        self._inbox: collections.deque[Request] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.iteration = 0
        self.forward_ct_decode = 0
        self.total_accept_tokens = 0  # lifetime, per request per cycle (avg_spec_accept_length)
        self.total_accept_forward_ct = 0
        self._log_tic = time.perf_counter()
        self._log_gen_tokens = 0
        self._log_accept_tokens = self._log_correct = self._log_forward_ct = 0
        self._prefill_tic = time.perf_counter()
        # device-timer occupancy window (SGLang metrics_reporter.py _ForwardOccupancyLogWindow)
        self._occ_t0 = time.perf_counter()
        self._occ_gpu_s = 0.0
        self._occ_idle_s = 0.0
        self._pending_events: list[tuple[Request, dict]] = []
        self._pending_record: tuple | None = None
        self._thread = threading.Thread(target=self._run, name="emulator-engine", daemon=True)
        self.error: BaseException | None = None
        self.tracer = None  # lab.emulator.modelled_trace.EmulatorProfiler while /start_profile is served

    # ----------------------------------------------------------------- control
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 0.5) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, req: Request) -> None:
        """Queue a request (thread-safe)."""
        with self._cond:
            self._inbox.append(req)
            self._cond.notify()

    @property
    def avg_spec_accept_length(self) -> float | None:
        """Lifetime mean accept length (tokens per request per cycle), like SGLang's."""
        return self.total_accept_tokens / self.total_accept_forward_ct if self.total_accept_forward_ct else None

    def _draw_grants(self, batch: list[Request]) -> dict[Request, int]:
        """Accept lengths for one speculative cycle.

        ``SGLANG_SIMULATE_ACC_LEN``: one draw for the whole batch per step, like SGLang
        (``speculative/spec_utils.py`` ~505-559). Otherwise each request's draw is a function
        of (``--random-seed``, prompt, repeat, position) (:meth:`AcceptanceModel.draw_keyed`),
        so every mode sees the same accept lengths whatever the warm-up length or batch order.
        """
        if self.accept.simulate is not None:
            n = self.accept.draw()
            return {r: n for r in batch}
        return {r: self._accept_by_category.get(r.category, self.accept).draw_keyed(r.accept_key, r.completion_tokens)
                for r in batch}

    def _draw_grants_at(self, batch: list[Request], steps: int) -> dict[Request, int]:
        """:meth:`_draw_grants` for an adaptive tier of ``steps`` draft steps (``steps + 1`` draft
        tokens, as SGLang's adaptive runtime states, ``adaptive_runtime_state.py`` ~96-104); 0
        steps verifies one token: the bonus only."""
        if steps == 0:
            return {r: 1 for r in batch}
        out = {}
        for r in batch:
            key = (r.category if r.category in self._accept_by_category else None, steps)
            m = self._accept_at_steps.get(key)
            if m is None:
                base = self._accept_by_category.get(r.category, self.accept)
                p = base.step_p  # topk 1: the per-token probability
                m = self._accept_at_steps[key] = AcceptanceModel(p, steps, 1, steps + 1, base.simulate, self.rng)
            out[r] = m.draw() if m.simulate is not None else m.draw_keyed(r.accept_key, r.completion_tokens)
        return out

    # ----------------------------------------------------------------- loop
    def _run(self) -> None:
        try:
            self._raise_priority()
            self._loop()
        except BaseException as exc:  # surfaced by /health, then the server exits (on_death)
            self.error = exc
            self.log.exception("emulator engine thread died")
            if self.on_death is not None:
                self.on_death(exc)

    def _raise_priority(self) -> None:
        """Best effort: nice this thread to ``ENGINE_NICE`` so that, on a busy machine, it wakes
        at its deadlines (Linux per-thread nice; needs CAP_SYS_NICE, silently skipped otherwise)."""
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), ENGINE_NICE)
            self.log.info(f"emulator engine thread running at nice {ENGINE_NICE}")
        except (OSError, AttributeError):
            self.log.info("emulator engine thread at default priority (no permission to raise it)")

    def _loop(self) -> None:
        chained_start: float | None = None
        while True:
            with self._cond:
                idle_from = time.perf_counter()
                while not self._stop and not self._inbox and not self.waiting and not self.running:
                    chained_start = None
                    self._cond.wait(0.1)
                self._occ_idle_s += time.perf_counter() - idle_from
                stopping = self._stop
                while self._inbox and not stopping:
                    self.waiting.append(self._inbox.popleft())
            if stopping:
                self._flush_events()  # the last iteration's ground truth
                return
            start = chained_start if chained_start is not None else time.perf_counter()
            end = self._iterate(start)
            chained_start = end if (self.running or self.waiting or self._inbox) else None
            if chained_start is None:
                self._flush_events()

    def _flush_events(self) -> None:
        """Record the last finished iteration (truth, metrics, logs), then deliver its chunks."""
        if self._pending_record is not None:
            rec, self._pending_record = self._pending_record, None
            self._record(*rec)
        if self._pending_events:
            events, self._pending_events = self._pending_events, []
            self.deliver(events)

    def _kv_tokens(self, reqs: list[Request]) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for r in reqs)

    def _truth_request(self, r, finish_reason: str) -> None:
        """One request's line in the ground-truth file: arrival, first/last token times (s,
        the engine clock), prompt/completion tokens, verify count, the prompt's task ``category``
        (:mod:`lab.emulator.categories`; None when unmapped), ``finish_reason`` (``length`` or
        ``abort``), ``diverged_from`` (the token position from which the ``diverge-at`` fault
        altered its output, or None); flushed so a reader sees it at once."""
        self.truth.write({"kind": "request", "rid": r.rid, "arrival": r.arrival, "first_token": r.first_token,
                          "last_token": r.last_token, "prompt_tokens": r.prompt_tokens,
                          "completion_tokens": r.completion_tokens, "spec_verify_ct": r.spec_verify_ct,
                          "category": r.category, "finish_reason": finish_reason, "diverged_from": r.diverge_at},
                         flush=True)

    def _drop_aborted(self) -> None:
        gone = [r for r in (*self.waiting, *self.running) if r.aborted]
        if not gone:
            return
        self.waiting = collections.deque(r for r in self.waiting if not r.aborted)
        self.running = [r for r in self.running if not r.aborted]
        for r in gone:
            if r.internal:
                continue
            self._truth_request(r, "abort")

    def _iterate(self, start: float) -> float:
        a, prof = self.args, self.profile
        self._drop_aborted()
        if not self.waiting and not self.running:
            self._flush_events()
            return time.perf_counter()
        free = a.max_running_requests - len(self.running)
        new: list[Request] = []
        while self.waiting and len(new) < free:
            new.append(self.waiting.popleft())
        phases: list[tuple[str, float]]
        if new:
            kind, batch, graph = "prefill", new, False
            phases = [("extend", prof.prefill_s(sum(r.prompt_tokens for r in new)))]
            grants = {r: 1 for r in new}
        else:
            batch = self.running
            b, kv = len(batch), self._kv_tokens(batch)
            graph_ok = bool(self.graph_bs) and b <= self.graph_bs[-1]
            if self.accept is None:
                kind, graph = "decode", graph_ok
                phases = [("decode", prof.decode_s(b, kv, graph))]
                grants = {r: 1 for r in batch}
            else:
                kind = "spec"
                graph = graph_ok and prof.verify_graph_captured(a.speculative_attention_mode)
                steps = self.adaptive.steps_for(b) if self.adaptive is not None else (a.speculative_num_steps or 1)
                d_s, e_s = prof.draft_parts_s(b, steps)  # 0 steps: no draft, draft-extend still runs
                v_s = prof.verify_s(b, steps + 1 if self.adaptive is not None else (a.speculative_num_draft_tokens or 2),
                                    kv, a.speculative_attention_mode, graph)
                # SGLang's device-timer booking: a graph-replayed draft is "eagle_draft" /
                # "eagle_draft_extend"; an eager one runs through eager_runner and is booked as
                # "decode" / "extend" (eagle_worker_v2.py ~693-715, ~1182-1213; eager_runner.py
                # ~261, ~342-350). Draft graphs follow the batch limit and --disable-cuda-graph.
                phases = [("eagle_draft" if graph_ok else "decode", d_s), ("target_verify", v_s),
                          ("eagle_draft_extend" if graph_ok and not self.disable_draft_extend_graph else "extend", e_s)]
                if steps == 0:  # adaptive tier 0: no draft forward at all (eagle_worker_v2.py ~1179-1182)
                    phases = phases[1:]
                grants = self._draw_grants(batch) if self.adaptive is None else self._draw_grants_at(batch, steps)
                if self.adaptive is not None:
                    self._steps_pending.append((steps, {r.rid: grants[r] - 1 for r in batch if not r.internal}))
                    self.adaptive.on_verify([grants[r] - 1 for r in batch], b)
        planned = prof.overhead_s + sum(s for _, s in phases)
        phases = _merge(phases)
        # --- timed phases. The scheduler-overhead phase [start, start + overhead) absorbs the
        # previous iteration's bookkeeping; if that overran, the forward phases still get
        # their full planned durations (the iteration grows, and the ground truth shows it).
        base = max(start + prof.overhead_s, time.perf_counter())
        self._flush_events()  # runs inside the first forward phase (absorbed by its deadline)
        actual: dict[str, float] = {}
        t = deadline = base
        for cat, s in phases:
            deadline += s
            wait_until(deadline)
            now = time.perf_counter()
            actual[cat] = max(0.0, now - t)
            t = max(t, now)
        end = t
        self._account(kind, start, end, planned, batch, new, grants, actual, graph)
        return end

    def _account(self, kind: str, start: float, end: float, planned: float, batch: list[Request], new: list[Request],
                 grants: dict[Request, int], actual: dict[str, float], graph: bool) -> None:
        a = self.args
        events: list[tuple[Request, dict]] = []
        tokens: dict[str, int] = {}
        finished: list[Request] = []
        gen = 0
        running_before = len(self.running)  # a Prefill batch line's #running-req (requests already decoding)
        for r in batch:
            n = min(grants[r], r.max_new_tokens - r.completion_tokens)
            if kind == "spec":
                # SGLang counts the verify's whole accepted run (drafts + bonus) in meta_info, the
                # histogram and the log's accept len, and only then cuts output_ids at
                # max_new_tokens (0.5.16 batch_result_processor.py:592-595 and 680-685,
                # metrics_reporter.py:353-361, schedule_batch.py:1485-1489; shown on the real
                # captures by tests/unit/test_real_sglang_0516.py).
                correct = grants[r] - 1
                r.spec_verify_ct += 1
                r.num_correct_drafts += correct
                if len(r.histogram) <= correct:
                    r.histogram.extend([0] * (correct + 1 - len(r.histogram)))
                r.histogram[correct] += 1
                self._log_accept_tokens += grants[r]
                self._log_correct += correct
                self._log_forward_ct += 1
                self.total_accept_tokens += grants[r]
                self.total_accept_forward_ct += 1
            r.add_tokens(n, a.random_seed)
            gen += n
            if r.first_token is None:
                r.first_token = end
            r.last_token = end
            if not r.internal:  # /health probes stay out of the ground truth
                tokens[r.rid] = n
            done = r.completion_tokens >= r.max_new_tokens
            if done:
                r.finished = True
                finished.append(r)
            events.append((r, {"n": n, "ct": r.completion_tokens, "t": end, "finished": done}))
        if new:
            self.running.extend(new)
        if finished:
            gone = set(finished)
            self.running = [r for r in self.running if r not in gone]
        # Deferred to the start of the next iteration's forward phases (or now if idle):
        # the ground-truth line, metrics and log lines, then the chunks. Doing it here would
        # delay the next iteration (this thread wakes with cold caches), and waking the
        # event loop earlier makes it compete with this thread for the GIL.
        ntok = self._kv_tokens(self.running)
        queue = len(self.waiting) + len(self._inbox)
        self._pending_record = (kind, start, end, planned, len(batch), new, tokens, finished, actual, graph, gen,
                                len(self.running), ntok, queue, running_before)
        self._pending_events = events

    def _record(self, kind: str, start: float, end: float, planned: float, batch: int, new: list[Request],
                tokens: dict[str, int], finished: list[Request], actual: dict[str, float], graph: bool, gen: int,
                running: int, ntok: int, queue: int, running_before: int) -> None:
        """Ground truth, metrics and log lines of one finished iteration (``running``: requests
        running after it; ``running_before``: before it)."""
        a = self.args
        if kind == "spec":  # eager draft phases are booked as decode/extend, but are draft time
            draft_s = sum(actual.get(c, 0.0) for c in ("eagle_draft", "eagle_draft_extend", "decode", "extend"))
            decode_s = prefill_s = 0.0
        else:
            draft_s, decode_s, prefill_s = 0.0, actual.get("decode", 0.0), actual.get("extend", 0.0)
        it = {"kind": kind, "i": self.iteration, "start": start, "end": end, "batch": batch, "graph": graph,
              "draft_s": draft_s, "verify_s": actual.get("target_verify", 0.0), "decode_s": decode_s,
              "prefill_s": prefill_s, "planned_s": planned, "tokens": tokens,
              "booked_s": {c: round(v, 9) for c, v in actual.items()}}
        if kind == "spec" and self.adaptive is not None:
            # the adaptive tier that served this cycle and what its verify fed back (before any cut)
            it["num_steps"], it["correct_drafts"] = self._steps_pending.popleft()
            self._last_steps = it["num_steps"]
        self.iteration += 1
        self.truth.write(it)
        if self.tracer is not None:  # /start_profile .. /stop_profile (lab/emulator/modelled_trace.py)
            self.tracer.on_iteration(it, actual)
        for r in finished:
            if r.internal:
                continue
            self._truth_request(r, "length")
            self.metrics.on_finish(r.prompt_tokens, r.completion_tokens, r.spec_verify_ct, r.stream)
        self.metrics.on_forward(actual, kind != "prefill", graph)
        self._occ_gpu_s += sum(actual.values())
        self.metrics.set_queues(running, queue)
        usage = ntok / self.profile.kv_capacity_tokens.value
        if kind == "prefill":
            self._log_prefill(new, end, usage, running_before, queue)
        else:
            self._log_gen_tokens += gen
            self.forward_ct_decode += 1
            if self.forward_ct_decode % a.decode_log_interval == 0:
                self._log_decode(batch, graph, end, ntok, usage, queue)

    def _log_prefill(self, new: list[Request], now: float, usage: float, running: int, queue: int) -> None:
        """SGLang ``report_prefill_stats``: ``running`` is the number of requests decoding before this
        prefill (``#running-req`` counts the running batch, not the new sequences)."""
        gap = now - self._prefill_tic
        self._prefill_tic = now
        ntok = sum(r.prompt_tokens for r in new)
        self.log.info(prefill_batch_line(new_seq=len(new), new_token=ntok, token_usage=usage, running=running,
                                         queue=queue, cuda_graph=False, input_throughput=ntok / gap if gap > 0 else 0.0,
                                         occupancy=self._occupancy(now)))

    def _log_decode(self, running: int, graph: bool, now: float, ntok: int, usage: float, queue: int) -> None:
        """SGLang ``report_decode_stats`` at each ``decode_log_interval`` decode iterations."""
        gap = now - self._log_tic
        self._log_tic = now
        thr = self._log_gen_tokens / gap if gap > 0 else 0.0
        self._log_gen_tokens = 0
        if self.record_step_time:
            self.step_time_dict[running].append(gap / self.args.decode_log_interval)
        acc_len = acc_rate = None
        if self.accept is not None:
            fct = self._log_forward_ct
            acc_len = self._log_accept_tokens / fct if fct else 0.0
            steps = self._last_steps if self.adaptive is not None else (self.args.speculative_num_steps or 1)
            ndraft = steps + 1 if self.adaptive is not None else (self.args.speculative_num_draft_tokens or 2)
            # over the serving tier's drafts: an adaptive switch syncs server_args (0.5.16 eagle_worker_v2.py
            # 1420-1424), which metrics_reporter.py 765-773 reads
            drafts = fct * (ndraft - 1)
            acc_rate = self._log_correct / drafts if drafts else 0.0
            self._log_accept_tokens = self._log_correct = self._log_forward_ct = 0
            self.metrics.set_spec_steps(steps, ndraft)
        self.log.info(decode_batch_line(running=running, num_tokens=ntok, token_usage=usage, accept_len=acc_len,
                                        accept_rate=acc_rate, cuda_graph=graph, gen_throughput=thr, queue=queue,
                                        occupancy=self._occupancy(now)))

    def _occupancy(self, now: float) -> tuple[float, float] | None:
        """(forward %, forward + idle %) of the wall time since the last batch line, then reset;
        None without the device timer (SGLang adds the suffix only with it)."""
        if not self.metrics.device_timer:
            return None
        wall = now - self._occ_t0
        out = (100.0 * self._occ_gpu_s / wall, 100.0 * (self._occ_gpu_s + self._occ_idle_s) / wall) if wall > 0 else (0.0, 0.0)
        self._occ_t0, self._occ_gpu_s, self._occ_idle_s = now, 0.0, 0.0
        return out
