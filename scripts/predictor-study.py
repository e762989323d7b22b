#!/usr/bin/env python3
"""Where the latency predictor's error comes from: reads `epp-lab --samples` CSVs and reports TTFT and
TPOT MAPE for
  - live:      the prediction the scheduler used (epp's online model at dispatch);
  - lookahead: a copy of the chosen engine played forward from its exact state (what no feature set can
               beat by much: its only error is the arrivals after dispatch);
  - shadow:    a fresh engine holding only what epp knows of the replica's work, played forward the same
               way (crates/lab/src/simulation/shadow.rs);
  - residual-corrected: live, times the recent error on the same replica (known before dispatch);
  - offline XGBoost models on feature sets, trained on the first 60% of the run (time order) and scored
               on the rest, so each lever is measured on its own.

Usage: .venv/bin/python scripts/predictor-study.py FILE.csv [FILE.csv ...]
Needs numpy and xgboost (the repo's .venv has both).
"""
import csv
import sys

import numpy as np
import xgboost as xgb

# llm-d's training parameters (llm-d/llm-d-latency-predictor:training/training_server.py), as epp's trainer.
PARAMS = dict(objective="reg:squarederror", max_depth=6, eta=0.05, subsample=0.8, colsample_bytree=0.8,
              min_child_weight=5, gamma=0.2, alpha=0.01, reg_lambda=0.1, tree_method="hist", nthread=2,
              verbosity=0)
TREES = 200
OBJECTIVES = ("mean", "log-mean")


def load(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    cols = {k: np.array([float(r[k]) if k != "profile" else 0.0 for r in rows]) for k in rows[0]}
    return cols


def mape(pred, actual):
    ok = (actual > 0) & np.isfinite(actual) & np.isfinite(pred)
    return 100.0 * np.mean(np.abs(pred[ok] - actual[ok]) / actual[ok])


def feature_sets(c):
    """Named feature matrices: what epp has today, then one lever at a time."""
    uncached = (1 - c["obs_prefix_score"]) * c["obs_input_tokens"]
    llmd = [c["obs_waiting"] > 0, c["obs_kv"], c["obs_input_tokens"], c["obs_waiting"], c["obs_running"],
            c["obs_prefill_tokens_in_flight"], c["obs_decode_tokens_in_flight"], c["obs_prefix_score"],
            uncached, c["obs_accelerator_class"]]
    base = llmd + [c["obs_ms_since_last_token"], c["obs_last_step_ms"]]
    true_uncached = c["prompt_tokens"] - c["cached_tokens"]
    sets = {
        "without the stream's step": llmd,
        "epp today": base,
        "+ prefill ahead incl. own": base + [c["obs_prefill_tokens_in_flight"] + uncached],
        "+ that, and that x the last step": base + [c["obs_prefill_tokens_in_flight"] + uncached,
                                                    (c["obs_prefill_tokens_in_flight"] + uncached)
                                                    * c["obs_last_step_ms"]],
        "+ true cached tokens": base + [true_uncached],
        "+ engine's true waiting/running": base + [c["engine_waiting"], c["engine_running"]],
        "+ engine's backlog by phase": base + [c["engine_prefill_tokens"] + true_uncached,
                                               c["engine_prefilling"], c["engine_decoding"]],
        "+ the step in progress": base + [c["busy_for_ms"]],
        "+ since the last step, its length": base + [c["since_step_ms"], c["last_step_ms"]],
        "+ all of the engine's truth": base + [true_uncached, c["engine_prefill_tokens"] + true_uncached,
                                               c["engine_prefilling"], c["engine_decoding"],
                                               c["engine_waiting"], c["busy_for_ms"]],
        "+ lookahead (bound)": base + [c["lookahead_ttft_ms"]],
    }
    return {k: np.column_stack(v).astype(np.float32) for k, v in sets.items()}


def queue_formula(c, train):
    """A closed-form queue model fitted per accelerator class on the training rows (least squares weighted
    to relative error): TTFT from the prompt tokens to prefill ahead of the request including its own,
    that times the last step, the last step, what is left of the step in progress, running and waiting.
    The cheapest stand-in for a per-endpoint shadow of the engine's queue."""
    own = (1 - c["obs_prefix_score"]) * c["obs_input_tokens"]
    ahead = c["obs_prefill_tokens_in_flight"] + own
    step = c["obs_last_step_ms"]
    left = np.maximum(step - np.minimum(c["obs_ms_since_last_token"], 10000), 0)
    f = np.column_stack([np.ones_like(ahead), ahead, ahead * step / 100.0, step, left, c["obs_running"],
                         c["obs_waiting"]])
    y = c["ttft_ms"]
    out = np.full(len(y), np.nan)
    for k in np.unique(c["obs_accelerator_class"]):
        rows = c["obs_accelerator_class"] == k
        fit = train & rows
        if fit.sum() >= 20:
            w = 1.0 / np.maximum(y[fit], 1.0)
            coef, *_ = np.linalg.lstsq(f[fit] * w[:, None], y[fit] * w, rcond=None)
            out[rows] = f[rows] @ coef
    return np.where(np.isfinite(out), np.maximum(out, 1.0), np.nanmedian(y[train]))


def with_queue_formula(c, cut):
    """TTFT MAPE of the fitted queue formula alone, as a column beside epp's features, and as the trees'
    base margin (log-mean: the trees learn the log of the ratio to it)."""
    y = c["ttft_ms"]
    ok = np.isfinite(y) & (y > 0)
    train = np.arange(len(y)) < cut
    tr, te = train & ok, ~train & ok
    formula = queue_formula(c, tr)
    x = feature_sets(c)["epp today"]
    print(f"  TTFT  {'fitted queue formula alone':34s} {'':8s} {mape(formula[te], y[te]):6.1f}%")
    for name, xx, margin in (("+ queue formula as a column", np.column_stack([x, formula]), None),
                             ("epp today on the formula's margin", x, np.log(formula))):
        d = xgb.DMatrix(xx[tr], label=np.log(y[tr]))
        dt = xgb.DMatrix(xx[te])
        if margin is not None:
            d.set_base_margin(margin[tr])
            dt.set_base_margin(margin[te])
        p = np.exp(xgb.train(PARAMS, d, TREES).predict(dt))
        print(f"  TTFT  {name:34s} log-mean {mape(p, y[te]):6.1f}%")


def residual_corrected(c, target, tau, shrink):
    """epp's live predictions times exp(the time-decayed mean of log(actual / predicted) over the requests
    on the same replica whose outcome was known before this one arrived): does the last few seconds' error
    on an endpoint say anything about the next request's? tau: the decay (s); shrink: pseudo-count of zero
    residuals, so a lone residual moves a prediction little."""
    import math
    arr, rep = c["arrival_s"], c["replica"]
    pred, act = c[f"predicted_{target}_ms"], c[f"{target}_ms"]
    if target == "ttft":
        known = arr + act / 1e3
    else:
        known = arr + (c["ttft_ms"] + act * np.maximum(c["output_tokens"] - 1, 0)) / 1e3
    out = pred.copy()
    for r in np.unique(rep):
        idx = np.where(rep == r)[0]
        ev = sorted((j for j in idx if pred[j] > 0 and act[j] > 0 and np.isfinite(act[j])), key=lambda j: known[j])
        kt = np.array([known[j] for j in ev])
        sums, weights, s, w, last = [], [], 0.0, 0.0, None
        for j in ev:
            if last is not None:
                d = math.exp(-(known[j] - last) / tau)
                s, w = s * d, w * d
            s, w, last = s + math.log(act[j] / pred[j]), w + 1, known[j]
            sums.append(s)
            weights.append(w)
        for i in idx:
            e = np.searchsorted(kt, arr[i], side="left") - 1
            if pred[i] > 0 and e >= 0:
                d = math.exp(-(arr[i] - kt[e]) / tau)
                out[i] = pred[i] * math.exp(sums[e] * d / (weights[e] * d + shrink))
    return out


def with_residual_correction(c, cut):
    n = len(c["ttft_ms"])
    te = np.arange(n) >= cut
    for target in ("ttft", "tpot"):
        act = c[f"{target}_ms"]
        cells = [f"live {mape(c[f'predicted_{target}_ms'][te], act[te]):5.1f}%"]
        for tau in (2.0, 5.0, 15.0, 60.0):
            for shrink in (1.0, 5.0):
                p = residual_corrected(c, target, tau, shrink)
                cells.append(f"tau {tau:g} s/k {shrink:g}: {mape(p[te], act[te]):5.1f}%")
        print(f"  {target.upper()}  residual-corrected live model: " + ", ".join(cells))


def study(path):
    c = load(path)
    n = len(c["ttft_ms"])
    cut = int(n * 0.6)
    print(f"\n{path}: {n} completed requests; test = the last {n - cut}")
    test = slice(cut, n)
    live = c["predicted_ttft_ms"][test]
    print(f"  TTFT  live (epp's model at dispatch)     {mape(np.where(live > 0, live, np.nan), c['ttft_ms'][test]):6.1f}%")
    print(f"  TTFT  lookahead of the exact engine      {mape(c['lookahead_ttft_ms'][test], c['ttft_ms'][test]):6.1f}%")
    print(f"  TPOT  lookahead of the exact engine      {mape(c['lookahead_tpot_ms'][test], c['tpot_ms'][test]):6.1f}%")
    if "shadow_ttft_ms" in c:
        shadow = c["shadow_ttft_ms"][test]
        print(f"  TTFT  shadow of what epp knows           {mape(np.where(shadow > 0, shadow, np.nan), c['ttft_ms'][test]):6.1f}%")
    with_queue_formula(c, cut)
    with_residual_correction(c, cut)
    for target in ("ttft_ms", "tpot_ms"):
        y = c[target]
        ok = np.isfinite(y) & (y > 0)
        for name, x in feature_sets(c).items():
            for objective in OBJECTIVES:
                tr = np.zeros(n, bool)
                tr[:cut] = True
                tr &= ok
                te = ~np.zeros(n, bool)
                te[:cut] = False
                te &= ok
                yt = np.log(np.maximum(y[tr], 1e-3)) if objective == "log-mean" else y[tr]
                model = xgb.train(PARAMS, xgb.DMatrix(x[tr], label=yt), TREES)
                p = model.predict(xgb.DMatrix(x[te]))
                p = np.exp(p) if objective == "log-mean" else p
                print(f"  {target[:4].upper()}  {name:34s} {objective:8s} {mape(p, y[te]):6.1f}%")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        study(p)
