#!/usr/bin/env python3
"""The real xgboost side of epp's predictor tests (tests/predictor_xgboost.rs) and benchmark.

Why: epp's predictor claims to predict what xgboost predicts from the same JSON model, and its own trainer
claims to be about as accurate as xgboost on the same rows. Both claims are checked against the xgboost
package from PyPI (`make xgboost` installs xgboost-cpu and numpy into .venv), never against a copy.

Synthetic rows follow llm-d's TTFT feature set (llm-d/llm-d-latency-predictor:training/training_server.py):
kv_cache_percentage, input_token_length, num_request_waiting, num_request_running, prefix_cache_score,
prefill_tokens_in_flight, effective_input_tokens, is_queued, plus an accelerator class (0 = H100, 1 = L4).
Parameters are llm-d's (200 trees, depth 6, lr 0.05, subsample 0.8, colsample 0.8, min_child_weight 5,
gamma 0.2, reg_alpha 0.01, reg_lambda 0.1, hist, seed 42).

Usage:
  predictor-xgboost.py equivalence OUT_DIR [--rows N]
      trains reg:squarederror and reg:quantileerror (alpha 0.9) models; writes squarederror.json,
      quantile.json (Booster.save_model), rows.csv (features, some missing as NaN) and
      squarederror.pred / quantile.pred (xgboost's predictions, one per line)
  predictor-xgboost.py compare OUT_DIR [--rows N] [--objective squarederror|quantile]
      writes train.csv and test.csv (features then the target; 10% held out), trains xgboost on one
      thread and writes xgboost.json: {"mape", "train_seconds", "rows", "test_rows", "objective"}
  predictor-xgboost.py predict OUT_DIR
      loads OUT_DIR/model.json (a model epp wrote) with Booster.load_model, predicts OUT_DIR/rows.csv into
      model.pred, writes model.info ({"objective", "quantile_alpha", "feature_names", "num_features"}) and
      saves the model again as resaved.json (xgboost's own writing of epp's model)
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import xgboost as xgb

FEATURES = ["kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
            "prefix_cache_score", "prefill_tokens_in_flight", "effective_input_tokens", "is_queued",
            "accelerator_class"]


def llmd_params(objective: str) -> dict:
    params = {"max_depth": 6, "learning_rate": 0.05, "subsample": 0.8, "colsample_bytree": 0.8,
              "min_child_weight": 5, "gamma": 0.2, "reg_alpha": 0.01, "reg_lambda": 0.1,
              "tree_method": "hist", "seed": 42, "nthread": 1}
    if objective == "quantile":
        params.update(objective="reg:quantileerror", quantile_alpha=0.9)
    else:
        params.update(objective="reg:squarederror")
    return params


def synthetic(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """TTFT-like rows: queueing delay plus prefill of the uncached input, slower on L4s and at high KV."""
    rng = np.random.default_rng(seed)
    kv = rng.uniform(0, 1, rows)
    input_len = rng.integers(16, 8192, rows).astype(np.float64)
    waiting = rng.poisson(2.0, rows).astype(np.float64)
    running = rng.integers(0, 64, rows).astype(np.float64)
    prefix = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], rows) * rng.uniform(0.8, 1.0, rows)
    in_flight = rng.integers(0, 20000, rows).astype(np.float64)
    effective = (1 - prefix) * input_len
    queued = (waiting > 0).astype(np.float64)
    accel = rng.integers(0, 2, rows).astype(np.float64)
    per_token = np.where(accel == 1, 0.12, 0.03)
    ttft = (15 + effective * per_token * (1 + kv) + 0.002 * in_flight * per_token * 10 + 40 * waiting
            + 0.5 * running)
    ttft *= rng.lognormal(0, 0.05, rows)
    x = np.column_stack([kv, input_len, waiting, running, prefix, in_flight, effective, queued, accel])
    return x.astype(np.float32), ttft.astype(np.float32)


def write_csv(path: Path, x: np.ndarray, y: np.ndarray | None = None) -> None:
    # %.9g writes every float32 so that it parses back to the same float32.
    data = x if y is None else np.column_stack([x, y])
    np.savetxt(path, data, fmt="%.9g", delimiter=",")


def equivalence(out: Path, rows: int) -> None:
    x, y = synthetic(rows, 1)
    # The same rows without missing values too: epp's vectorised kernel takes blocks of rows with no NaN,
    # and the rows with some go the scalar way, so both are compared with xgboost.
    dense = x.copy()
    # Missing values exercise default_left; xgboost treats NaN as missing.
    mask = np.random.default_rng(2).uniform(0, 1, x.shape) < 0.05
    x[mask] = np.nan
    write_csv(out / "rows.csv", x)
    write_csv(out / "rows.dense.csv", dense)
    for name in ("squarederror", "quantile"):
        booster = xgb.train(llmd_params(name), xgb.DMatrix(x, y), num_boost_round=200)
        booster.save_model(str(out / f"{name}.json"))
        pred = booster.predict(xgb.DMatrix(x))
        np.savetxt(out / f"{name}.pred", pred.astype(np.float32), fmt="%.9g")
        pred = booster.predict(xgb.DMatrix(dense))
        np.savetxt(out / f"{name}.dense.pred", pred.astype(np.float32), fmt="%.9g")


def compare(out: Path, rows: int, objective: str) -> None:
    x, y = synthetic(rows, 3)
    split = rows - rows // 10
    write_csv(out / "train.csv", x[:split], y[:split])
    write_csv(out / "test.csv", x[split:], y[split:])
    start = time.perf_counter()
    train = xgb.DMatrix(x[:split], y[:split])
    booster = xgb.train(llmd_params(objective), train, num_boost_round=200)
    seconds = time.perf_counter() - start
    pred = booster.predict(xgb.DMatrix(x[split:]))
    mape = float(np.mean(np.abs(pred - y[split:]) / y[split:]))
    result = {"mape": mape, "train_seconds": seconds, "rows": split, "test_rows": rows - split,
              "objective": objective, "xgboost": xgb.__version__}
    (out / "xgboost.json").write_text(json.dumps(result))
    print(json.dumps(result))


def predict(out: Path) -> None:
    booster = xgb.Booster()
    booster.load_model(str(out / "model.json"))
    x = np.loadtxt(out / "rows.csv", delimiter=",", dtype=np.float32, ndmin=2)
    pred = booster.predict(xgb.DMatrix(x, feature_names=booster.feature_names))
    np.savetxt(out / "model.pred", pred.astype(np.float32), fmt="%.9g")
    config = json.loads(booster.save_config())["learner"]["objective"]
    alpha = config.get("quantile_loss_param", {}).get("quantile_alpha")
    info = {"objective": config["name"], "quantile_alpha": alpha, "feature_names": booster.feature_names,
            "num_features": booster.num_features()}
    (out / "model.info").write_text(json.dumps(info))
    booster.save_model(str(out / "resaved.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["equivalence", "compare", "predict"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--objective", choices=["squarederror", "quantile"], default="squarederror")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.command == "equivalence":
        equivalence(args.out, args.rows)
    elif args.command == "predict":
        predict(args.out)
    else:
        compare(args.out, args.rows, args.objective)


if __name__ == "__main__":
    main()
