//! The latency predictor's training flags. They take llm-d's training-server environment variables too
//! (llm-d/llm-d-latency-predictor:training/training_server.py; the chart sets them on the sidecar), so a
//! deployment's existing settings carry over; the defaults are llm-d's chart values
//! (llm-d/llm-d-router:config/charts/routerlib/values.yaml). They matter only when the configuration has
//! a `predicted-latency-producer`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::predictor::online::OnlineConfig;
use crate::predictor::train::Objective;

/// What the models estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ObjectiveFlag {
    /// The mean (squared error), llm-d's chart default.
    Mean,
    /// The `--latency-quantile-alpha` quantile (pinball loss), llm-d's code default.
    Quantile,
    /// The geometric mean: squared error on ln(latency), saved as XGBoost's `reg:gamma` (an epp
    /// extension: relative error is what matters, and latencies span orders of magnitude).
    LogMean,
}

/// `--latency-quantile-alpha`'s default (llm-d's).
pub const DEFAULT_QUANTILE_ALPHA: f32 = 0.9;

impl ObjectiveFlag {
    /// The trainer's objective; `alpha` is the quantile a `quantile` model estimates.
    pub fn objective(self, alpha: f32) -> Objective {
        match self {
            ObjectiveFlag::Mean => Objective::SquaredError,
            ObjectiveFlag::Quantile => Objective::Quantile { alpha },
            ObjectiveFlag::LogMean => Objective::LogSquaredError,
        }
    }
}

/// Parses a duration given as seconds (`10`, as llm-d's `*_SEC` variables are) or with a unit (`10s`).
fn seconds_or_duration(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(Duration::from_secs_f64(secs)),
        Ok(_) => Err(format!("{text:?} is not a duration")),
        Err(_) => humantime::parse_duration(text.trim()).map_err(|e| e.to_string()),
    }
}

#[derive(Debug, Clone, Args)]
pub struct PredictorFlags {
    /// How often the latency predictor retrains (seconds, or with a unit).
    #[arg(long, env = "LATENCY_RETRAINING_INTERVAL_SEC", default_value = "10s", value_parser = seconds_or_duration)]
    pub latency_retraining_interval: Duration,
    /// Training samples a model needs before it is first trained.
    #[arg(long, env = "LATENCY_MIN_SAMPLES_FOR_RETRAIN", default_value_t = 100)]
    pub latency_min_samples_for_retrain: usize,
    /// Training samples a model needs for its first training, while it has none.
    #[arg(long, env = "LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", default_value_t = 10)]
    pub latency_min_samples_for_retrain_fresh: usize,
    /// Newest samples kept per training stratum (queue × KV × prefix, 400 strata).
    #[arg(long, env = "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET", default_value_t = 500)]
    pub latency_max_training_data_size_per_bucket: usize,
    /// What the models estimate.
    #[arg(long, env = "LATENCY_OBJECTIVE_TYPE", value_enum, default_value = "mean", ignore_case = true)]
    pub latency_objective_type: ObjectiveFlag,
    /// The quantile a `quantile` model estimates, in (0, 1).
    #[arg(long, env = "LATENCY_QUANTILE_ALPHA", default_value_t = DEFAULT_QUANTILE_ALPHA)]
    pub latency_quantile_alpha: f32,
    /// Directory the models are saved to (XGBoost JSON, periodically and at shutdown) and loaded from at
    /// start; unset keeps them in memory.
    #[arg(long)]
    pub latency_model_dir: Option<PathBuf>,
    /// How often the models are saved to --latency-model-dir.
    #[arg(long, default_value = "60s", value_parser = seconds_or_duration)]
    pub latency_model_save_interval: Duration,
    /// An XGBoost JSON TTFT model to start from when --latency-model-dir holds none (e.g. what llm-d's
    /// training server serves at /model/ttft/xgb/json).
    #[arg(long)]
    pub latency_seed_ttft_model: Option<PathBuf>,
    /// An XGBoost JSON TPOT model to start from (streaming mode only).
    #[arg(long, requires = "latency_seed_ttft_model")]
    pub latency_seed_tpot_model: Option<PathBuf>,
}

impl PredictorFlags {
    /// The service settings; errors name the flag.
    pub fn online_config(&self) -> Result<OnlineConfig, String> {
        let defaults = OnlineConfig::default();
        if self.latency_retraining_interval.is_zero() {
            return Err("--latency-retraining-interval must be > 0".into());
        }
        if self.latency_max_training_data_size_per_bucket == 0 {
            return Err("--latency-max-training-data-size-per-bucket must be at least 1".into());
        }
        let alpha = self.latency_quantile_alpha;
        if alpha.is_nan() || alpha <= 0.0 || alpha >= 1.0 {
            return Err(format!("--latency-quantile-alpha: {alpha} is outside (0, 1)"));
        }
        let objective = self.latency_objective_type.objective(alpha);
        Ok(OnlineConfig {
            retrain_interval: self.latency_retraining_interval,
            min_samples: self.latency_min_samples_for_retrain,
            min_samples_fresh: self.latency_min_samples_for_retrain_fresh,
            params: crate::predictor::train::Params { objective, ..defaults.params.clone() },
            per_bucket: self.latency_max_training_data_size_per_bucket,
            model_dir: self.latency_model_dir.clone(),
            save_interval: self.latency_model_save_interval,
            seed_ttft: self.latency_seed_ttft_model.clone(),
            seed_tpot: self.latency_seed_tpot_model.clone(),
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        flags: PredictorFlags,
    }

    fn parse(args: &[&str]) -> Result<PredictorFlags, String> {
        Wrapper::try_parse_from(std::iter::once("epp").chain(args.iter().copied()))
            .map(|w| w.flags)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_llmd_chart_values() {
        let config = parse(&[]).unwrap().online_config().unwrap();
        assert_eq!(config.retrain_interval, Duration::from_secs(10));
        assert_eq!((config.min_samples, config.per_bucket), (100, 500));
        assert_eq!(config.params.objective, Objective::SquaredError);
    }

    #[test]
    fn bare_seconds_and_quantile_objective() {
        let flags =
            parse(&["--latency-retraining-interval", "2", "--latency-objective-type", "QUANTILE"]).unwrap();
        let config = flags.online_config().unwrap();
        assert_eq!(config.retrain_interval, Duration::from_secs(2));
        assert_eq!(config.params.objective, Objective::Quantile { alpha: 0.9 });
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = parse(&["--latency-quantile-alpha", "1.5"]).unwrap().online_config().unwrap_err();
        assert!(err.contains("--latency-quantile-alpha"), "{err}");
        let err = parse(&["--latency-retraining-interval", "0"]).unwrap().online_config().unwrap_err();
        assert!(err.contains("--latency-retraining-interval"), "{err}");
        assert!(parse(&["--latency-retraining-interval", "soon"]).is_err());
    }
}
