"""``knee estimate --calibrate-from STUDY``: predictions from the step profile a study fitted
on its own machine (core/sweep/calibration.py), for other concurrencies, knobs and lengths.

The study's model and machine are the ones used: a calibration describes the machine it was
measured on, so ``--gpu``/``--instance``/``--model`` are refused here rather than silently
ignored.
"""

from __future__ import annotations

from dataclasses import replace

from tui.cli.common import int_list, print_json


def run_calibrated(args) -> int:
    from core.errors import BadInput
    from core.results.store import StudyStore, default_storage
    from core.sweep import calibration as calib
    from core.sweep.space import server_config

    for flag in ("gpu", "instance", "model", "plan"):
        if getattr(args, flag, None):
            raise BadInput(
                f"--{flag} cannot be combined with --calibrate-from",
                "the calibration describes the study's own model and machine; drop the flag",
            )
    shapes = {"dataset": "--dataset", "range_ratio": "--range-ratio", "lengths_from": "--lengths-from", "no_ignore_eos": "--no-ignore-eos"}
    for attr, flag in shapes.items():
        if getattr(args, attr, None):
            raise BadInput(
                f"{flag} cannot be combined with --calibrate-from",
                "the calibrated curve prices fixed lengths: set them with --input-len/--output-len",
            )
    store = StudyStore(args.storage or default_storage(getattr(args, "workspace", None)), create=False)
    cal = calib.stored(store, args.calibrate_from)
    spec = store.spec(args.calibrate_from)
    tps = int_list(args.tp, "--tp") if args.tp else sorted(cal.profiles)
    missing = [t for t in tps if t not in cal.profiles]
    if missing:
        raise BadInput(
            f"study {args.calibrate_from!r} has no calibration for TP{missing[0]}",
            f"it fitted TP {', '.join(map(str, sorted(cal.profiles)))}; measure TP{missing[0]} at two concurrencies",
        )
    if getattr(args, "no_client_ceiling", False):
        # The server alone: the ceiling describes the client that measured the study on its
        # machine, not what production traffic from many clients would meet.
        cal.profiles = {tp: replace(p, client_send_s=0.0) for tp, p in cal.profiles.items()}
    # Default lengths: what the study measured (its calibration is surest there).
    obs = cal_lengths(store, args.calibrate_from)
    isl = int(args.input_len or obs[0] or spec.input_len)
    osl = int(args.output_len or obs[1] or spec.output_len)
    concs = int_list(args.concurrency, "--concurrency") if args.concurrency else [1, 2, 4, 8, 16, 32, 64]
    knobs = {"tensor_parallel_size": None}
    for flag, key in (("max_num_seqs", "max_num_seqs"), ("max_num_batched_tokens", "max_num_batched_tokens"), ("max_model_len", "max_model_len")):
        if getattr(args, flag, None):
            knobs[key] = getattr(args, flag)
    out = []
    for tp in tps:
        cfg = server_config(spec.model, {**{k: v for k, v in knobs.items() if v is not None}, "tensor_parallel_size": tp})
        out.append({"tp": tp, "profile": cal.profiles[tp].as_dict(), "points": calib.predict_curve(cal, cfg, isl, osl, concs)})
    if args.json:
        print_json({"study": args.calibrate_from, "model": spec.model, "input_len": isl, "output_len": osl, "calibrated": out})
        return 0
    print(f"{spec.model}: calibrated by study {args.calibrate_from!r} ({cal.as_dict()['points']} points, {cal.refits} refits), {isl} in / {osl} out")
    for block in out:
        p = block["profile"]
        ceiling = (
            f"; the study's client sent at most {1e3 / p['client_send_ms']:.1f} requests/s, and the figures below keep that ceiling (--no-client-ceiling: the server alone)"
            if p.get("client_send_ms")
            else ""
        )
        print(
            f"TP{block['tp']}: step {p['step_ms']:.3f} ms + {p['seq_ms']:.4f} ms/seq + {p['token_us']:.2f} us/token, request overhead {p['request_overhead_ms']:.1f} ms{ceiling}"
        )
        print(f"  {'conc':>5} {'TTFT ms':>9} {'TPOT ms':>9} {'E2E s':>8} {'req/s':>8} {'out tok/s':>10}")
        for r in block["points"]:
            if "mean_ttft_ms" not in r:
                print(f"  {r['concurrency']:>5} does not run (see knee estimate without --calibrate-from)")
                continue
            print(
                f"  {r['concurrency']:>5} {r['mean_ttft_ms']:9.1f} {r['mean_tpot_ms']:9.2f} {r['mean_e2el_ms'] / 1e3:8.2f} "
                f"{r['request_throughput']:8.2f} {r['output_throughput']:10.1f}"
            )
    return 0


def cal_lengths(store, study: str) -> tuple[int | None, int | None]:
    """Median measured input and output tokens per request over the study's closed-loop points."""
    import statistics

    from core.sweep.calibration import observation

    obs = [o for p in store.points(study, status="ok") if (o := observation(p.server_args, p.client_args, p.summary))]
    if not obs:
        return None, None
    return int(statistics.median(o.input_len for o in obs)), int(statistics.median(o.output_len for o in obs))
