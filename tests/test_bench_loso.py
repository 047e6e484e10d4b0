"""Issue 11's honest validation (bench/fit.py, ``--loso`` in both accuracy benches): a
held-out source's rows are never in the fit that predicts them, the LOSO report has every
metric, rows that cannot be predicted are listed, and fitting leaves calibration.toml's
values in force outside the bench."""

import json

import pytest

from support.published_rows import GOOD, row as _row

ROWS = [
    {**_row("srca-1", concurrency=16), "source": "source A :: table 1"},
    {**_row("srca-2", concurrency=4), "source": "source A :: table 1"},
    {**_row("srcb-1", concurrency=8), "source": "source B"},
    {**_row("srcb-2", concurrency=32), "source": "source B", "metrics": {**GOOD["metrics"], "itl_ms": 40.0, "e2e_s": 7.0}},
    {**_row("srcc-1", concurrency=None), "source": "source C"},  # unpredictable: no concurrency
]


@pytest.fixture
def rows_path(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return p


def test_source_is_the_id_prefix():
    from bench.fit import source_of

    assert source_of({"id": "trt014-07"}) == "trt014"
    assert source_of({"id": "trt014-07"}, "publisher") == "trt"
    assert source_of({"id": "infsim2-3"}, "publisher") == "infsim"


def test_held_out_rows_are_never_fitted_on_and_unpredictable_rows_are_listed():
    from bench import fit
    from bench.loso import loso
    from core.estimate.params import _calibration_file, calibration

    its, skipped = fit.items(ROWS)
    assert [s["id"] for s in skipped] == ["srcc-1"] and "without a concurrency" in skipped[0]["reason"]
    folds = loso(its)
    assert [f.source for f in folds] == ["srca", "srcb"]
    for f in folds:
        assert set(f.held_ids) == {it.id for it in its if it.id.startswith(f.source)}
        assert not set(f.held_ids) & set(f.fit.train_ids)
        assert set(f.fit.train_ids) == {it.id for it in its} - set(f.held_ids)
        assert set(f.predictions) == set(f.held_ids)
        # only the A10G's (ampere) and vLLM legacy's parameters can move; the rest keep their values
        assert all(k.startswith(("architecture.ampere.", "engine.vllm-legacy.")) for k in f.fit.free)
        assert f.fit.fixed["architecture.hopper.mfu"]
        for k, (v, lo, hi) in fit.parameters().items():
            assert lo <= f.fit.params[k] <= hi
    assert calibration() is _calibration_file()  # nothing left overridden


def test_folds_fitted_in_parallel_are_the_folds_fitted_one_by_one_and_each_is_reported():
    """``--jobs``: the folds are independent, so forked workers fit them at once; they come
    back in order with the same parameters and predictions, and each is reported as it ends
    (a LOSO of the two fitting files takes an hour on one core)."""
    from bench import fit
    from bench.loso import loso

    its, _ = fit.items(ROWS)
    lines: list[str] = []
    serial, parallel = loso(its), loso(its, jobs=2, progress=lines.append)
    assert [f.source for f in parallel] == [f.source for f in serial]
    for a, b in zip(serial, parallel, strict=True):
        assert a.fit.params == b.fit.params and a.predictions == b.predictions
    assert len(lines) == 2 and lines[0].startswith("LOSO fold 1/2 (srca: 2 rows held out, fitted on 2")


def test_calibrated_overrides_only_inside_the_block():
    from bench import fit
    from core.estimate.params import calibrated, calibration

    its, _ = fit.items(ROWS[:1])
    base = fit.predict_with(its, None)[0]
    slow = fit.predict_with(its, {"architecture.ampere.bw_weights": 0.4, "engine.vllm-legacy.step_us": 8000.0})[0]
    assert slow["output_tok_per_s"] < base["output_tok_per_s"]
    assert fit.predict_with(its, None)[0] == base
    shipped = calibration()["architecture"]["ampere"]["mfu"]
    assert shipped != 0.3
    with calibrated({"architecture.ampere.mfu": 0.3}):
        assert calibration()["architecture"]["ampere"]["mfu"] == 0.3
    assert calibration()["architecture"]["ampere"]["mfu"] == shipped
    with pytest.raises(KeyError):
        with calibrated({"architecture.nosuch.mfu": 0.5}):
            pass


def test_accuracy_loso_json_has_every_metric_and_lists_skipped(rows_path, capsys):
    from bench import accuracy
    from bench.rows import METRICS

    assert accuracy.main([str(rows_path), "--loso", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)  # one document
    assert [s["id"] for s in rep["skipped"]] == ["srcc-1"]
    h = rep["honest"]
    for col in ("hand_set", "fitted", "loso"):
        assert set(METRICS) <= set(h[col]) and all(m + "_n" in h[col] for m in METRICS)
    assert h["loso"]["req_per_s_n"] == 4 and set(h["by_source"]) == {"srca", "srcb"}
    for f in h["folds"]:
        assert not set(f["held_ids"]) & set(f["train_ids"])
    for r in rep["rows"]:
        assert set(r["ape_loso"]) == set(METRICS) and r["knee_loso"]["req_per_s"] > 0
    line = rep["summary"]["line"]
    assert "fitted in-sample:" in line and "LOSO:" in line

    assert accuracy.main([str(rows_path), str(rows_path), "--loso", "--quiet"]) == 0  # two files read together
    text = capsys.readouterr().out
    assert "srcc-1: online-concurrency row without a concurrency" in text
    assert "LOSO (held out)" in text and text.rstrip().splitlines()[-1].startswith("SUMMARY")


def test_sim_accuracy_loso(rows_path, capsys):
    from bench import sim_accuracy
    from bench.rows import METRICS

    assert sim_accuracy.main([str(rows_path), "--loso", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in rep["skipped"]] == ["srcc-1"]
    h = rep["honest"]
    assert set(METRICS) <= set(h["loso"]) and h["loso"]["req_per_s_n"] == 4
    for f in h["folds"]:
        assert not set(f["held_ids"]) & set(f["train_ids"])
    assert "LOSO:" in rep["summary_line"]


def test_the_prior_holds_parameters_that_the_rows_barely_move(monkeypatch):
    """With the prior's weight near infinity every parameter keeps its prior; without it the
    same rows move some; the penalty is zero at the prior and grows both ways."""
    from bench import fit, fit_priors

    assert fit.prior_cost(0.5, 0.5) == 0.0
    assert fit.prior_cost(0.6, 0.5) > 0 and fit.prior_cost(0.5 / 1.2, 0.5) == pytest.approx(fit.prior_cost(0.6, 0.5))
    # PCIe all-reduce has no datasheet value: its spread is wider, so moving it costs less
    assert fit.prior_cost(60.0, 30.0, "interconnect.pcie.allreduce_us") < fit.prior_cost(0.8, 0.4, "interconnect.nvlink.link_eff")
    its, _ = fit.items(ROWS)
    monkeypatch.setattr(fit_priors, "PRIOR_WEIGHT", 0.0)  # where prior_cost reads it
    free = fit.fit(its)
    monkeypatch.setattr(fit_priors, "PRIOR_WEIGHT", 1e9)
    held = fit.fit(its)
    assert free.changed, "the rows should move some parameter when nothing holds it"
    assert held.changed == {}


def test_transfer_fits_on_one_file_and_judges_another(rows_path, tmp_path, capsys):
    """bench.transfer: parameters fitted on the training file only, every test row judged
    with the shipped and the fitted calibration, unpredictable test rows counted, not fatal."""
    from bench import transfer
    from bench.rows import METRICS

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]))
    assert transfer.main(["--train", str(train), "--test", str(rows_path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["train_rows"] == 2 and rep["test_rows"] == 4 and rep["test_skipped"] == 1
    for col in ("shipped", "fitted"):
        assert set(METRICS) <= set(rep[col]) and rep[col]["req_per_s_n"] == 4
    assert rep["line"].startswith("SUMMARY fitted on 2 rows")
