//! epp-sim: a fleet of simulated vLLM servers whose latency behaves like vLLM's (continuous batching,
//! chunked prefill, prefix cache, preemption, LoRA slots), for measuring epp's routing without GPUs.
//!
//! Each replica is its own engine on its own port (`--port`, `--port + 1`, ...), with an OpenAI API,
//! `/health`, `/v1/models` and a vLLM V1 `/metrics` page. `--time-scale 10` runs ten times faster than
//! real time while every reported latency stays in simulated (vLLM-equivalent) seconds.

use std::process::ExitCode;

use clap::Parser;
use epp_sim::{serve, AcceleratorProfile, FaultOptions, MetricsMode, ServeOptions, SimError};

#[derive(Parser, Debug)]
#[command(
    name = "epp-sim",
    about = "Simulated vLLM fleet with realistic latency, for epp routing experiments"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port of the first replica; replica i listens on port + i (0: free ports).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Number of replicas (default: the number of --profiles, else 1).
    #[arg(long)]
    replicas: Option<usize>,
    /// Accelerator profile of every replica (h100-8b, l4-8b, a100-8b, h200-8b, h100x4-70b).
    #[arg(long, default_value = "h100-8b", conflicts_with = "profiles")]
    profile: String,
    /// One profile per replica, comma-separated, for a heterogeneous fleet.
    #[arg(long, value_delimiter = ',')]
    profiles: Vec<String>,
    /// Run this many times faster than real time.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Served model name.
    #[arg(long, default_value = "meta-llama/Llama-3.1-8B-Instruct")]
    model: String,
    #[arg(long)]
    max_num_seqs: Option<usize>,
    #[arg(long)]
    max_num_batched_tokens: Option<usize>,
    #[arg(long)]
    num_gpu_blocks: Option<usize>,
    /// Disable automatic prefix caching.
    #[arg(long)]
    no_prefix_caching: bool,
    /// Step-time noise as a relative standard deviation (default 0.05).
    #[arg(long)]
    noise: Option<f64>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// LoRA adapters served beside the base model (`a,b` or vLLM's `name=path`).
    #[arg(long, value_delimiter = ',')]
    lora_modules: Vec<String>,
    #[arg(long, default_value_t = 1)]
    max_loras: usize,
    /// `max_tokens` for requests that give none.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
    /// Probability that a request gets HTTP 500.
    #[arg(long, default_value_t = 0.0)]
    error_rate: f64,
    /// Probability that a request is held for --latency-spike-ms (simulated) before it is queued.
    #[arg(long, default_value_t = 0.0)]
    latency_spike_rate: f64,
    #[arg(long, default_value_t = 1000)]
    latency_spike_ms: u64,
    /// Probability that a streamed response is cut after a few tokens.
    #[arg(long, default_value_t = 0.0)]
    die_mid_stream_rate: f64,
    /// How /metrics behaves.
    #[arg(long, value_enum, default_value_t = MetricsMode::Ok)]
    metrics_mode: MetricsMode,
    /// Emit pre-0.10 metric names (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*).
    #[arg(long)]
    legacy_metric_names: bool,
    /// Replica names (x-sim-replica) are <prefix>-<port>.
    #[arg(long, default_value = "sim")]
    name_prefix: String,
    /// Report `usage.prompt_tokens_details.cached_tokens`, as vLLM does only with this flag (otherwise
    /// `prompt_tokens_details` is null).
    #[arg(long)]
    enable_prompt_tokens_details: bool,
    /// Publish KV-cache events over ZMQ as vLLM's `--kv-events-config` does: replica i binds a PUB
    /// socket at `--host`:(this + i), topic `kv@<host>:<port>@<model>`.
    #[arg(long)]
    kv_events_port: Option<u16>,
    /// With --kv-events-port: replica i serves replays of its last 10,000 batches (vLLM's
    /// `replay_endpoint`) at `--host`:(this + i).
    #[arg(long, requires = "kv_events_port")]
    kv_replay_port: Option<u16>,
    /// P/D: the bandwidth at which a decode replica receives a prefilled prompt's KV blocks, in GB/s.
    #[arg(long, default_value_t = 25.0)]
    kv_transfer_gbps: f64,
    /// P/D: bytes of KV per token (the transfer's size is this × the prompt's tokens).
    #[arg(long, default_value_t = 131_072)]
    kv_bytes_per_token: u64,
    /// The model's own tokenizer for prompts: a directory with `tokenizer.json` and, for chat,
    /// `tokenizer_config.json` (its chat template), as a model repository ships them. Without it, one
    /// stand-in token per 4 bytes of the request's JSON.
    #[arg(long)]
    tokenizer_dir: Option<std::path::PathBuf>,
}

fn profile(name: &str) -> Result<AcceleratorProfile, SimError> {
    AcceleratorProfile::by_name(name).ok_or_else(|| {
        SimError::Invalid(format!(
            "unknown profile {name:?}; known profiles: {}",
            AcceleratorProfile::KNOWN.join(", ")
        ))
    })
}

/// One profile per replica from `--profile`, `--profiles` and `--replicas`.
fn replica_profiles(args: &Args) -> Result<Vec<AcceleratorProfile>, SimError> {
    if args.profiles.is_empty() {
        let count = args.replicas.unwrap_or(1);
        if count == 0 {
            return Err(SimError::Invalid("--replicas must be at least 1".into()));
        }
        return Ok(vec![profile(&args.profile)?; count]);
    }
    let listed = args.profiles.iter().map(|name| profile(name)).collect::<Result<Vec<_>, _>>()?;
    match args.replicas {
        None => Ok(listed),
        Some(n) if n == listed.len() => Ok(listed),
        Some(n) if listed.len() == 1 && n > 0 => Ok(vec![listed[0].clone(); n]),
        Some(n) => {
            Err(SimError::Invalid(format!("--replicas {n} but --profiles names {} profiles", listed.len())))
        }
    }
}

fn options(args: &Args) -> Result<ServeOptions, SimError> {
    let lora_modules = args
        .lora_modules
        .iter()
        .map(|m| m.split('=').next().unwrap_or(m).trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    let options = ServeOptions {
        host: args.host.clone(),
        port: args.port,
        profiles: replica_profiles(args)?,
        model: args.model.clone(),
        max_num_seqs: args.max_num_seqs,
        max_num_batched_tokens: args.max_num_batched_tokens,
        num_gpu_blocks: args.num_gpu_blocks,
        enable_prefix_caching: !args.no_prefix_caching,
        noise: args.noise,
        seed: args.seed,
        time_scale: args.time_scale,
        lora_modules,
        max_loras: args.max_loras,
        default_max_tokens: args.max_tokens,
        faults: FaultOptions {
            error_rate: args.error_rate,
            latency_spike_rate: args.latency_spike_rate,
            latency_spike_ms: args.latency_spike_ms,
            die_mid_stream_rate: args.die_mid_stream_rate,
            metrics_mode: args.metrics_mode,
        },
        legacy_metric_names: args.legacy_metric_names,
        name_prefix: args.name_prefix.clone(),
        prompt_tokens_details: args.enable_prompt_tokens_details,
        kv_events_port: args.kv_events_port,
        kv_replay_port: args.kv_replay_port,
        kv_transfer_gbps: args.kv_transfer_gbps,
        kv_bytes_per_token: args.kv_bytes_per_token,
        tokenizer: match &args.tokenizer_dir {
            Some(dir) => Some(epp_sim::ModelTokenizer::load(dir).map_err(epp_sim::SimError::Invalid)?),
            None => None,
        },
    };
    options.validate()?;
    Ok(options)
}

async fn run(args: Args) -> Result<(), SimError> {
    let options = options(&args)?;
    let addrs = serve(options.clone()).await?;
    for (addr, profile) in addrs.iter().zip(&options.profiles) {
        println!(
            "epp-sim id={}-{} profile={} model={} listening on {addr}",
            options.name_prefix,
            addr.port(),
            profile.name,
            options.model
        );
    }
    if tokio::signal::ctrl_c().await.is_err() {
        // No signal handler available: serve until killed.
        std::future::pending::<()>().await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("epp-sim: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Args {
        Args::try_parse_from(std::iter::once("epp-sim").chain(line.split_whitespace())).unwrap()
    }

    fn names(line: &str) -> Result<Vec<String>, String> {
        options(&args(line))
            .map(|o| o.profiles.into_iter().map(|p| p.name).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn fleets() {
        assert_eq!(names(""), Ok(vec!["h100-8b".to_string()]));
        assert_eq!(names("--replicas 2 --profile l4-8b"), Ok(vec!["l4-8b".to_string(); 2]));
        assert_eq!(names("--profiles h100-8b,h100-8b,l4-8b").map(|p| p.len()), Ok(3));
        assert_eq!(names("--profiles l4-8b --replicas 3").map(|p| p.len()), Ok(3));
    }

    #[test]
    fn bad_flags_are_clear_errors() {
        let unknown = names("--profile a100").unwrap_err();
        assert!(unknown.contains("known profiles: h100-8b, l4-8b"), "{unknown}");
        assert!(names("--profiles h100-8b,l4-8b --replicas 3").unwrap_err().contains("--replicas 3"));
        assert!(names("--replicas 0").is_err());
        assert!(names("--time-scale 0").unwrap_err().contains("time-scale"));
        assert!(names("--error-rate 2").unwrap_err().contains("--error-rate"));
        assert!(names("--max-num-seqs 0").unwrap_err().contains("max_num_seqs"));
        assert!(Args::try_parse_from(["epp-sim", "--metrics-mode", "weird"]).is_err());
        assert!(Args::try_parse_from(["epp-sim", "--profile", "l4-8b", "--profiles", "l4-8b"]).is_err());
    }

    #[test]
    fn lora_modules_accept_vllm_syntax() {
        let o = options(&args("--lora-modules a=/path/a,b --max-loras 2")).unwrap();
        assert_eq!(o.lora_modules, vec!["a", "b"]);
        assert_eq!(o.max_loras, 2);
    }
}
