//! epp's predictor against the real xgboost (PyPI `xgboost-cpu` in `.venv`, installed by `make xgboost`),
//! driven through scripts/predictor-xgboost.py:
//!
//! - equivalence: models xgboost trained and saved as JSON predict here what xgboost predicts, within
//!   1e-4 relative on every row (with missing values, and the same rows without), for squared error and
//!   quantile (α = 0.9);
//! - the other way: models epp trained and wrote with `save_xgboost_json` load in xgboost
//!   (`Booster.load_model`) with their objective and feature names, predict there what they predict here,
//!   and xgboost's re-save of them loads back in epp unchanged;
//! - side by side: epp's trainer and xgboost, same rows and llm-d's parameters, MAPE on the same
//!   held-out rows. `PREDICTOR_COMPARE_ROWS` sets the size (`make bench` runs 200,000 in release).
//!
//! Without the venv's xgboost the tests fail (`EPP_SKIP_MISSING_TOOLS=1` skips them, printing SKIP,
//! outside CI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use epp::predictor::train::{train, Objective, Params};
use epp::predictor::{load_xgboost_json, save_xgboost_json, XgbObjective};
use epp_testkit::{manifest_dir, missing_tool};

/// The venv's Python when it can import xgboost; else a failure, or `None` after a SKIP line when the
/// developer opted out ([`missing_tool`]).
fn python_with_xgboost(test_name: &str) -> Option<PathBuf> {
    let python = std::env::var_os("PREDICTOR_PYTHON")
        .map_or_else(|| manifest_dir().join(".venv/bin/python"), PathBuf::from);
    let works = Command::new(&python)
        .args(["-c", "import xgboost, numpy"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !works {
        let what = format!("xgboost not importable from {} (run `make xgboost`)", python.display());
        missing_tool(test_name, &what);
        return None;
    }
    Some(python)
}

fn run_script(python: &Path, args: &[&str]) {
    let script = manifest_dir().join("scripts/predictor-xgboost.py");
    let out = Command::new(python).arg(script).args(args).output().expect("run scripts/predictor-xgboost.py");
    assert!(
        out.status.success(),
        "predictor-xgboost.py {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Rows of comma-separated numbers (numpy writes missing values as `nan`, which `f32` parses).
fn read_csv(path: &Path) -> Vec<Vec<f32>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            line.split(',').map(|v| v.trim().parse().unwrap_or_else(|e| panic!("{v:?}: {e}"))).collect()
        })
        .collect()
}

#[test]
fn xgboost_models_predict_here_what_they_predict_in_xgboost() {
    let Some(python) = python_with_xgboost("xgboost_models_predict_here_what_they_predict_in_xgboost") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().to_str().expect("utf-8 temp path");
    run_script(&python, &["equivalence", out]);
    // With missing values (the scalar kernel's default directions) and the same rows without (blocks of
    // rows with no NaN take the vectorised kernel where the CPU has it).
    for (rows_file, suffix) in [("rows.csv", "pred"), ("rows.dense.csv", "dense.pred")] {
        let rows: Vec<f32> = read_csv(&dir.path().join(rows_file)).concat();
        for (name, objective) in [
            ("squarederror", XgbObjective::SquaredError),
            ("quantile", XgbObjective::Quantile { alpha: 0.9 }),
        ] {
            let json = std::fs::read(dir.path().join(format!("{name}.json"))).expect("model file");
            let model = load_xgboost_json(&json).unwrap_or_else(|e| panic!("{name}.json: {e}"));
            assert_eq!(model.objective, objective);
            assert_eq!(model.forest.n_trees(), 200);
            let expected: Vec<f32> = read_csv(&dir.path().join(format!("{name}.{suffix}"))).concat();
            let mut got = vec![0.0; expected.len()];
            model.forest.predict_batch(&rows, &mut got);
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                let tolerance = 1e-4 * e.abs().max(1.0);
                assert!((g - e).abs() <= tolerance, "{name} {rows_file} row {i}: epp {g}, xgboost {e}");
            }
        }
    }
}

/// Splits `features…, target` rows into flat features and targets.
fn features_and_targets(rows: Vec<Vec<f32>>) -> (Vec<f32>, Vec<f32>, usize) {
    let n_features = rows.first().map_or(0, |row| row.len() - 1);
    let targets = rows.iter().map(|row| row[n_features]).collect();
    let features = rows.iter().flat_map(|row| row[..n_features].iter().copied()).collect();
    (features, targets, n_features)
}

#[test]
fn epp_trainer_is_as_accurate_as_xgboost_on_the_same_rows() {
    let Some(python) = python_with_xgboost("epp_trainer_is_as_accurate_as_xgboost_on_the_same_rows") else {
        return;
    };
    let rows = std::env::var("PREDICTOR_COMPARE_ROWS").unwrap_or_else(|_| "20000".into());
    let dir = tempfile::tempdir().expect("temp dir");
    run_script(&python, &["compare", dir.path().to_str().expect("utf-8 temp path"), "--rows", &rows]);
    let xgb: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("xgboost.json")).expect("xgboost.json"))
            .expect("json");
    let xgb_mape = xgb["mape"].as_f64().expect("mape");
    let (train_x, train_y, n_features) = features_and_targets(read_csv(&dir.path().join("train.csv")));
    let (test_x, test_y, _) = features_and_targets(read_csv(&dir.path().join("test.csv")));

    let params = Params { objective: Objective::SquaredError, ..Params::default() };
    let start = Instant::now();
    let forest = train(&params, &train_x, n_features, &train_y).expect("train");
    let epp_seconds = start.elapsed().as_secs_f64();
    let mut pred = vec![0.0; test_y.len()];
    forest.predict_batch(&test_x, &mut pred);
    let epp_mape = pred.iter().zip(&test_y).map(|(p, y)| f64::from((p - y).abs() / y)).sum::<f64>()
        / test_y.len() as f64;

    // Timings are printed, never asserted (a debug build under `make test` is far slower than release).
    println!(
        "side by side, {} train rows, {} held out, 200 trees: epp MAPE {:.4} in {epp_seconds:.2} s ({}), \
         xgboost {} MAPE {xgb_mape:.4} in {:.2} s (1 thread)",
        train_y.len(),
        test_y.len(),
        epp_mape,
        if cfg!(debug_assertions) { "debug build" } else { "release build" },
        xgb["xgboost"].as_str().unwrap_or("?"),
        xgb["train_seconds"].as_f64().unwrap_or(f64::NAN),
    );
    // The bar: epp's MAPE at most 5% above xgboost's on the same held-out rows.
    assert!(epp_mape <= 1.05 * xgb_mape, "epp MAPE {epp_mape:.4} > 1.05 × xgboost MAPE {xgb_mape:.4}");
}

/// Writes rows as CSV with every float32 exact (`{:?}` is the shortest text that parses back) and NaN as
/// `nan`, which numpy reads as missing.
fn write_csv(path: &Path, rows: &[f32], n_features: usize) {
    let text: String = rows
        .chunks_exact(n_features)
        .map(|row| {
            let cells: Vec<String> =
                row.iter().map(|x| if x.is_nan() { "nan".to_string() } else { format!("{x:?}") }).collect();
            cells.join(",") + "\n"
        })
        .collect();
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

#[test]
fn xgboost_loads_epp_models_and_predicts_what_epp_predicts() {
    let Some(python) = python_with_xgboost("xgboost_loads_epp_models_and_predicts_what_epp_predicts") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().to_str().expect("utf-8 temp path");
    run_script(&python, &["compare", out, "--rows", "3000"]);
    let (train_x, train_y, n_features) = features_and_targets(read_csv(&dir.path().join("train.csv")));
    let (mut test_x, _, _) = features_and_targets(read_csv(&dir.path().join("test.csv")));
    // Some missing values, so every default direction is exercised on xgboost's side too.
    for (i, x) in test_x.iter_mut().enumerate() {
        if i % 17 == 3 {
            *x = f32::NAN;
        }
    }
    write_csv(&dir.path().join("rows.csv"), &test_x, n_features);
    let names: Vec<String> = (0..n_features).map(|f| format!("feature_{f}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for (objective, xgb_objective, name, alpha) in [
        (Objective::SquaredError, XgbObjective::SquaredError, "reg:squarederror", None),
        (
            Objective::Quantile { alpha: 0.9 },
            XgbObjective::Quantile { alpha: 0.9 },
            "reg:quantileerror",
            Some(0.9),
        ),
        // A log-target model: xgboost's reg:gamma applies the same exp link to the same margin.
        (Objective::LogSquaredError, XgbObjective::Gamma, "reg:gamma", None),
    ] {
        let params = Params { objective, n_trees: 100, ..Params::default() };
        let targets: Vec<f32> = match objective {
            Objective::LogSquaredError => train_y.iter().map(|y| y.abs() + 1.0).collect(),
            _ => train_y.clone(),
        };
        let forest = train(&params, &train_x, n_features, &targets).expect("train");
        let json = save_xgboost_json(&forest, xgb_objective, &names).expect("save");
        std::fs::write(dir.path().join("model.json"), json).expect("write model.json");
        run_script(&python, &["predict", out]);

        let info: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("model.info")).expect("model.info"))
                .expect("json");
        assert_eq!(info["objective"], name);
        assert_eq!(info["num_features"], n_features);
        assert_eq!(info["feature_names"], serde_json::json!(names));
        if let Some(alpha) = alpha {
            let text = info["quantile_alpha"].as_str().expect("quantile_alpha");
            let read: f32 = text.trim_matches(['[', ']']).parse().expect("a number");
            assert_eq!(read, alpha, "quantile_alpha {text}");
        }
        let expected: Vec<f32> = read_csv(&dir.path().join("model.pred")).concat();
        let mut got = vec![0.0; expected.len()];
        forest.predict_batch(&test_x, &mut got);
        for margin in &mut got {
            *margin = objective.output(*margin);
        }
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            let tolerance = 1e-5 * e.abs().max(1.0);
            assert!((g - e).abs() <= tolerance, "{name} row {i}: epp {g}, xgboost {e}");
        }
        // And back: xgboost's own writing of epp's model loads in epp with the same predictions.
        let resaved = load_xgboost_json(&std::fs::read(dir.path().join("resaved.json")).expect("resaved"))
            .expect("epp reads xgboost's re-save");
        let mut again = vec![0.0; expected.len()];
        resaved.forest.predict_batch(&test_x, &mut again);
        for margin in &mut again {
            *margin = objective.output(*margin);
        }
        // reg:gamma's base score goes through exp and ln on the way: equal to rounding, not to the bit.
        let same = |a: f32, b: f32| match objective {
            Objective::LogSquaredError => (a - b).abs() <= 1e-5 * a.abs().max(1.0),
            _ => a.to_bits() == b.to_bits(),
        };
        assert!(got.iter().zip(&again).all(|(&a, &b)| same(a, b)), "{name}: re-save differs");
        assert_eq!(resaved.objective, xgb_objective);
    }
}
