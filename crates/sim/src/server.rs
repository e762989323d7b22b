//! The `epp-sim` HTTP server: one OpenAI-compatible vLLM look-alike per replica, each on its own port
//! with its own engine, plus fault injection for testing how epp copes with misbehaving servers.
//!
//! Why a library function: tests (and other harnesses) start the real server in-process on
//! `127.0.0.1:0` with [`serve`] and talk to it over HTTP, exactly as epp would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::serve::ListenerExt;
use axum::Router;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::engine::{AcceleratorProfile, EngineConfig, EngineConfigError};
use super::exposition::{render, PageInputs, GAUGE_FAMILIES};
use super::kv_events::KvPublisher;
use super::replica::Replica;

/// Request bodies above this are refused.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// What vLLM 0.32's `/metrics` answers with (its prometheus_client), whatever the Accept header asks.
const PROMETHEUS_TEXT: &str = "text/plain; version=1.0.0; charset=utf-8";

/// How `/metrics` misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MetricsMode {
    #[default]
    Ok,
    /// Never answers.
    Hang,
    /// Answers after 2 s (wall clock).
    Slow,
    /// Answers 200 with random bytes.
    Garbage,
}

/// Fault injection; every rate is a probability per request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultOptions {
    /// Answer HTTP 500 with a JSON error instead of generating.
    pub error_rate: f64,
    /// Hold a request for `latency_spike_ms` (simulated) before it reaches the engine.
    pub latency_spike_rate: f64,
    pub latency_spike_ms: u64,
    /// Cut a streaming response after a few tokens (no `[DONE]`, connection closed).
    pub die_mid_stream_rate: f64,
    pub metrics_mode: MetricsMode,
}

/// Everything [`serve`] needs. [`ServeOptions::new`] gives one H100 replica with vLLM defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeOptions {
    pub host: String,
    /// First port; replica `i` listens on `port + i` (0: every replica picks a free port).
    pub port: u16,
    /// One profile per replica.
    pub profiles: Vec<AcceleratorProfile>,
    pub model: String,
    pub max_num_seqs: Option<usize>,
    pub max_num_batched_tokens: Option<usize>,
    pub num_gpu_blocks: Option<usize>,
    pub enable_prefix_caching: bool,
    /// Step-time noise (relative std dev); the profile default when `None`.
    pub noise: Option<f64>,
    /// Replica `i` seeds its engine with `seed + i`.
    pub seed: u64,
    /// Run this many times faster than real time.
    pub time_scale: f64,
    pub lora_modules: Vec<String>,
    pub max_loras: usize,
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: u32,
    pub faults: FaultOptions,
    /// Emit the pre-0.10 KV metric names.
    pub legacy_metric_names: bool,
    /// Replica names are `<name_prefix>-<port>` (the `x-sim-replica` header).
    pub name_prefix: String,
    /// `usage.prompt_tokens_details` carries `cached_tokens` (vLLM's `--enable-prompt-tokens-details`);
    /// off, it is null, as vLLM answers by default.
    pub prompt_tokens_details: bool,
    /// Publish KV-cache events (vLLM's `--kv-events-config` ZMQ stream): replica `i` binds a PUB socket
    /// at `host:kv_events_port + i`, topic `kv@<host>:<port>@<model>`.
    pub kv_events_port: Option<u16>,
    /// With `kv_events_port`: replica `i` also serves replays of its last batches (vLLM's
    /// `replay_endpoint`) at `host:kv_replay_port + i`.
    pub kv_replay_port: Option<u16>,
    /// P/D: how fast a decode replica receives a prefilled prompt's KV blocks (GB/s; NIXL over RDMA
    /// reaches tens), and how many bytes a token's KV takes (Llama-3.1-8B in bf16: 32 layers × 8 KV
    /// heads × 128 dims × 2 (K and V) × 2 bytes = 131,072).
    pub kv_transfer_gbps: f64,
    pub kv_bytes_per_token: u64,
    /// The model's own tokenizer for prompts (`--tokenizer-dir`); the stand-in when `None`.
    pub tokenizer: Option<super::model_tokens::ModelTokenizer>,
}

impl ServeOptions {
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 0,
            profiles: vec![AcceleratorProfile::h100_8b()],
            model: model.into(),
            max_num_seqs: None,
            max_num_batched_tokens: None,
            num_gpu_blocks: None,
            enable_prefix_caching: true,
            noise: None,
            seed: 0,
            time_scale: 1.0,
            lora_modules: Vec::new(),
            max_loras: 1,
            default_max_tokens: 128,
            faults: FaultOptions::default(),
            legacy_metric_names: false,
            name_prefix: "sim".into(),
            prompt_tokens_details: false,
            kv_events_port: None,
            kv_replay_port: None,
            kv_transfer_gbps: 25.0,
            kv_bytes_per_token: 131_072,
            tokenizer: None,
        }
    }

    /// The engine config of replica `index`.
    pub fn engine_config(&self, index: usize) -> Option<EngineConfig> {
        let profile = self.profiles.get(index)?.clone();
        let mut cfg = EngineConfig::for_profile(profile);
        cfg.max_num_seqs = self.max_num_seqs.unwrap_or(cfg.max_num_seqs);
        cfg.max_num_batched_tokens = self.max_num_batched_tokens.unwrap_or(cfg.max_num_batched_tokens);
        cfg.num_gpu_blocks = self.num_gpu_blocks.unwrap_or(cfg.num_gpu_blocks);
        cfg.enable_prefix_caching = self.enable_prefix_caching;
        cfg.noise = self.noise.unwrap_or(cfg.noise);
        cfg.max_loras = self.max_loras;
        cfg.seed = self.seed.wrapping_add(index as u64);
        Some(cfg)
    }

    /// Checks every user-settable value, so that a bad flag is a clear error and never a panic.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.profiles.is_empty() {
            return Err(SimError::Invalid("at least one replica is needed".into()));
        }
        if self.model.trim().is_empty() {
            return Err(SimError::Invalid("--model must not be empty".into()));
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(SimError::Invalid(format!("--time-scale must be > 0, got {}", self.time_scale)));
        }
        if self.default_max_tokens == 0 {
            return Err(SimError::Invalid("--max-tokens must be at least 1".into()));
        }
        if !(self.kv_transfer_gbps.is_finite() && self.kv_transfer_gbps > 0.0) {
            return Err(SimError::Invalid(format!(
                "--kv-transfer-gbps must be > 0, got {}",
                self.kv_transfer_gbps
            )));
        }
        let f = &self.faults;
        let rates = [
            ("--error-rate", f.error_rate),
            ("--latency-spike-rate", f.latency_spike_rate),
            ("--die-mid-stream-rate", f.die_mid_stream_rate),
        ];
        if let Some((flag, rate)) = rates.iter().find(|(_, r)| !(0.0..=1.0).contains(r)) {
            return Err(SimError::Invalid(format!("{flag} must be a probability in [0, 1], got {rate}")));
        }
        if let Some(name) = self.lora_modules.iter().find(|m| m.trim().is_empty() || **m == self.model) {
            return Err(SimError::Invalid(format!("invalid LoRA module name {name:?}")));
        }
        if self.port as usize + self.profiles.len() - 1 > u16::MAX as usize && self.port != 0 {
            return Err(SimError::Invalid("--port + --replicas runs past port 65535".into()));
        }
        if self.kv_replay_port.is_some() && self.kv_events_port.is_none() {
            return Err(SimError::Invalid("--kv-replay-port needs --kv-events-port".into()));
        }
        let kv_ports = [("--kv-events-port", self.kv_events_port), ("--kv-replay-port", self.kv_replay_port)];
        for (flag, base) in kv_ports.iter().filter_map(|(flag, port)| Some((flag, (*port)?))) {
            if base == 0 || usize::from(base) + self.profiles.len() - 1 > usize::from(u16::MAX) {
                return Err(SimError::Invalid(format!(
                    "{flag} {base}: replica i uses it + i, within 1-65535"
                )));
            }
        }
        for index in 0..self.profiles.len() {
            self.engine_config(index).map(|c| c.validate()).transpose()?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Invalid(String),
    #[error("invalid engine setting: {0}")]
    Engine(#[from] EngineConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("cannot publish KV events on {addr}: {message}")]
    KvEvents { addr: String, message: String },
}

/// Shared by every replica's router.
pub(crate) struct ServerState {
    pub options: ServeOptions,
    pub replica: Arc<Replica>,
    pub replica_header: HeaderValue,
    pub created_unix: f64,
    pub rng: Mutex<SmallRng>,
    pub max_model_len: usize,
}

impl ServerState {
    /// A uniform draw in [0, 1) from the replica's fault RNG.
    pub(crate) fn chance(&self, rate: f64) -> bool {
        rate > 0.0 && self.rng.lock().unwrap_or_else(PoisonError::into_inner).random::<f64>() < rate
    }

    pub(crate) fn random_in(&self, low: u32, high: u32) -> u32 {
        self.rng.lock().unwrap_or_else(PoisonError::into_inner).random_range(low..=high)
    }
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Starts every replica and returns their addresses, in replica order. The servers run on the current
/// tokio runtime until it shuts down.
pub async fn serve(options: ServeOptions) -> Result<Vec<SocketAddr>, SimError> {
    options.validate()?;
    let mut listeners = Vec::with_capacity(options.profiles.len());
    for index in 0..options.profiles.len() {
        let port = if options.port == 0 { 0 } else { options.port + index as u16 };
        let addr = format!("{}:{port}", options.host);
        let listener =
            tokio::net::TcpListener::bind(&addr).await.map_err(|source| SimError::Bind { addr, source })?;
        listeners.push(listener);
    }
    let mut addrs = Vec::with_capacity(listeners.len());
    for (index, listener) in listeners.into_iter().enumerate() {
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: format!("{}:{}", options.host, options.port),
            source,
        })?;
        let name = format!("{}-{}", options.name_prefix, addr.port());
        let replica_header = HeaderValue::from_str(&name)
            .map_err(|_| SimError::Invalid(format!("replica name {name:?} is not a valid header value")))?;
        let config = options.engine_config(index).ok_or_else(|| SimError::Invalid("no profile".into()))?;
        let max_model_len = config.kv_capacity_tokens();
        let seed = config.seed ^ 0x5eed_fa17;
        let publisher = kv_publisher(&options, index, addr, config.block_size).await?;
        let state = Arc::new(ServerState {
            replica: Replica::start(name, config, options.time_scale, publisher),
            options: options.clone(),
            replica_header,
            created_unix: unix_now(),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            max_model_len,
        });
        let app = Router::new().fallback(handle).with_state(state);
        tokio::spawn(async move {
            // Streamed tokens are small writes: without TCP_NODELAY each waits for a delayed ACK (~40 ms).
            let listener = listener.tap_io(|t| {
                let _ = t.set_nodelay(true);
            });
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(%addr, "epp-sim replica stopped: {e}");
            }
        });
        addrs.push(addr);
    }
    Ok(addrs)
}

/// Replica `index`'s KV-event publisher, when the options ask for one.
async fn kv_publisher(
    options: &ServeOptions,
    index: usize,
    addr: SocketAddr,
    block_size: usize,
) -> Result<Option<KvPublisher>, SimError> {
    let Some(base) = options.kv_events_port else { return Ok(None) };
    // validate() keeps base + index within u16.
    let port = base.saturating_add(index as u16);
    let bind = format!("tcp://{}:{port}", options.host);
    let topic = format!("kv@{}:{}@{}", options.host, addr.port(), options.model);
    let replay = options.kv_replay_port.map(|base| {
        let port = base.saturating_add(index as u16);
        format!("tcp://{}:{port}", options.host)
    });
    KvPublisher::bind(&bind, replay.as_deref(), topic, block_size)
        .await
        .map(Some)
        .map_err(|e| SimError::KvEvents { addr: bind, message: e.to_string() })
}

pub(crate) fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An error body shaped like vLLM's (OpenAI's) `{"error": {...}}`.
pub(crate) fn error_response(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body =
        json!({"error": {"message": message.into(), "type": kind, "param": null, "code": status.as_u16()}});
    respond(status, "application/json", body.to_string())
}

/// An error naming the request parameter at fault in `param`, as vLLM's validation errors do.
pub(crate) fn param_error_response(status: StatusCode, kind: &str, param: &str, message: String) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": param, "code": status.as_u16()}});
    respond(status, "application/json", body.to_string())
}

async fn handle(State(state): State<Arc<ServerState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let mut response = match (&parts.method, path.as_str()) {
        (&Method::GET, "/health") => respond(StatusCode::OK, "text/plain", ""),
        // vLLM's two routes: `/metrics` ignores a query, `/metrics/` honours `name[]` (super::name_filter).
        (&Method::GET, "/metrics") => metrics(&state, &[]).await,
        (&Method::GET, "/metrics/") => {
            let names = parts.uri.query().map(super::name_filter::requested_names).unwrap_or_default();
            metrics(&state, &names).await
        }
        (&Method::GET, "/v1/models") => models(&state),
        (&Method::POST, "/v1/completions" | "/v1/chat/completions") => {
            match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
                Ok(bytes) => super::openai::generate(&state, &path, bytes).await,
                Err(e) => error_response(
                    StatusCode::BAD_REQUEST,
                    "BadRequestError",
                    format!("cannot read body: {e}"),
                ),
            }
        }
        (&Method::POST, "/v1/completions/render" | "/v1/chat/completions/render") => {
            match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
                Ok(bytes) => super::openai::render(&state, &path, &bytes),
                Err(e) => error_response(
                    StatusCode::BAD_REQUEST,
                    "BadRequestError",
                    format!("cannot read body: {e}"),
                ),
            }
        }
        (_, "/health" | "/metrics" | "/v1/models" | "/v1/completions" | "/v1/chat/completions") => {
            error_response(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "Method Not Allowed")
        }
        _ => error_response(StatusCode::NOT_FOUND, "NotFoundError", format!("no route for {path}")),
    };
    let headers = response.headers_mut();
    headers.insert("x-sim-replica", state.replica_header.clone());
    headers.insert("x-backend-id", state.replica_header.clone());
    response
}

/// The page, or only the samples `names` lists when it lists any.
async fn metrics(state: &ServerState, names: &[String]) -> Response {
    match state.options.faults.metrics_mode {
        MetricsMode::Ok => {}
        MetricsMode::Hang => std::future::pending::<()>().await,
        MetricsMode::Slow => tokio::time::sleep(Duration::from_secs(2)).await,
        MetricsMode::Garbage => {
            let len = state.random_in(64, 4096) as usize;
            let bytes: Vec<u8> = {
                let mut rng = state.rng.lock().unwrap_or_else(PoisonError::into_inner);
                (0..len).map(|_| rng.random::<u8>()).collect()
            };
            return respond(StatusCode::OK, PROMETHEUS_TEXT, Bytes::from(bytes));
        }
    }
    let snapshot = state.replica.snapshot();
    let options = &state.options;
    let mut page = String::with_capacity(16 * 1024);
    // A page restricted to the load gauges (what epp asks for) is rendered without the rest, as
    // prometheus_client's restricted registry collects only the named families.
    let history = names.is_empty() || names.iter().any(|n| !GAUGE_FAMILIES.contains(&n.as_str()));
    render(
        &mut page,
        &PageInputs {
            model: &options.model,
            config: &snapshot.config,
            stats: &snapshot.stats,
            requests: &snapshot.requests,
            lora: (!options.lora_modules.is_empty()).then_some(options.max_loras),
            legacy_names: options.legacy_metric_names,
            created: state.created_unix,
            now: unix_now(),
        },
        history,
    );
    if !names.is_empty() {
        page = super::name_filter::restrict(&page, names);
    }
    respond(StatusCode::OK, PROMETHEUS_TEXT, page)
}

fn models(state: &ServerState) -> Response {
    let options = &state.options;
    let created = state.created_unix as u64;
    let card = |id: &str, parent: Option<&str>| {
        json!({"id": id, "object": "model", "created": created, "owned_by": "vllm", "root": id,
               "parent": parent, "max_model_len": state.max_model_len, "permission": []})
    };
    let mut data = vec![card(&options.model, None)];
    data.extend(options.lora_modules.iter().map(|name| card(name, Some(&options.model))));
    respond(StatusCode::OK, "application/json", json!({"object": "list", "data": data}).to_string())
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
