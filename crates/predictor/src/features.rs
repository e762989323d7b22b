//! The feature rows the TTFT and TPOT models see: llm-d's tree-model feature sets (llm-d/
//! llm-d-latency-predictor:training/training_server.py) plus the endpoint's accelerator class, so one
//! pool may mix L4s and H100s and still get one model per target.
//!
//! Why fixed-size arrays: a row is written for every candidate of every request, so it goes straight
//! into the caller's batch buffer (no allocation per candidate), in a column order that never changes
//! (a model is only meaningful with the order it was trained on).

/// TTFT row columns, in order: llm-d's, the accelerator class, then what epp sees of the endpoint's
/// engine step in the tokens it streams (`ms_since_last_token`, `last_step_ms`).
pub const TTFT_COLUMNS: [&str; 16] = [
    "is_queued",
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
    "encoder_matched_size",
    "encoder_input_size",
    "prefix_cache_score",
    "effective_input_tokens",
    "prefill_score_bucket",
    "pod_type",
    "accelerator_class",
    "ms_since_last_token",
    "last_step_ms",
];

/// TPOT row columns, in order.
pub const TPOT_COLUMNS: [&str; 10] = [
    "is_queued",
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
    "num_tokens_generated",
    "pod_type",
    "accelerator_class",
];

/// The endpoint's role in prefill/decode disaggregation, as llm-d's `pod_type_cat` codes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PodType {
    #[default]
    Both = 0,
    Prefill = 1,
    Decode = 2,
}

/// What is known about one candidate endpoint for one request at dispatch time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observation {
    /// KV-cache utilisation, 0–1 (clamped).
    pub kv_cache_percentage: f32,
    pub input_tokens: u32,
    /// The endpoint's waiting queue.
    pub waiting: u32,
    /// Requests epp has in flight on the endpoint.
    pub running: u32,
    /// Fraction of the prompt's blocks already cached there, 0–1 (NaN counts as 0, as in llm-d).
    pub prefix_cache_score: f32,
    /// Prompt tokens epp has dispatched to the endpoint that are still to be prefilled: the uncached part
    /// of the prompts of requests with no first response chunk yet (llm-d's meaning; epp counts the phase
    /// from the stream itself).
    pub prefill_tokens_in_flight: u64,
    /// The prompts of the requests epp has decoding there (past their first chunk): the decode context
    /// every step pays for. llm-d leaves this 0; a model trained there never splits on it.
    pub decode_tokens_in_flight: u64,
    pub encoder_matched_size: u32,
    pub encoder_input_size: u32,
    /// Always 1 at prediction time in llm-d; the TPOT trainer may zero it.
    pub tokens_generated: u32,
    pub pod_type: PodType,
    /// The endpoint's accelerator/variant class code (see [`AcceleratorClasses`]).
    pub accelerator_class: u16,
    /// Milliseconds since a response token last passed from the endpoint (capped; large when idle), and
    /// the gap between its last two engine steps as the stream showed them (0 before two were seen):
    /// together, how long the step in progress still runs, which a new request waits out first.
    pub ms_since_last_token: f32,
    pub last_step_ms: f32,
}

impl Observation {
    fn prefix(&self) -> f32 {
        if self.prefix_cache_score.is_nan() {
            0.0
        } else {
            self.prefix_cache_score.clamp(0.0, 1.0)
        }
    }

    /// The prompt tokens the endpoint would have to prefill: the part not in its prefix cache.
    pub fn uncached_tokens(&self) -> u64 {
        ((1.0 - f64::from(self.prefix())) * f64::from(self.input_tokens)).round() as u64
    }

    /// Writes the TTFT row (columns [`TTFT_COLUMNS`]).
    pub fn ttft_row(&self, out: &mut [f32; TTFT_COLUMNS.len()]) {
        let prefix = self.prefix();
        let input = self.input_tokens as f32;
        // The prefix score in quarters, the categorical 0–3 llm-d's `prefill_score_bucket` is.
        let bucket = (prefix * 4.0).floor().min(3.0);
        *out = [
            f32::from(u8::from(self.waiting > 0)),
            self.kv(),
            input,
            self.waiting as f32,
            self.running as f32,
            self.prefill_tokens_in_flight as f32,
            self.decode_tokens_in_flight as f32,
            self.encoder_matched_size.min(self.encoder_input_size) as f32,
            self.encoder_input_size as f32,
            prefix,
            (1.0 - prefix) * input,
            bucket,
            self.pod_type as u8 as f32,
            f32::from(self.accelerator_class),
            self.ms_since_last_token,
            self.last_step_ms,
        ];
    }

    /// Writes the TPOT row (columns [`TPOT_COLUMNS`]).
    pub fn tpot_row(&self, out: &mut [f32; TPOT_COLUMNS.len()]) {
        *out = [
            f32::from(u8::from(self.waiting > 0)),
            self.kv(),
            self.input_tokens as f32,
            self.waiting as f32,
            self.running as f32,
            self.prefill_tokens_in_flight as f32,
            self.decode_tokens_in_flight as f32,
            self.tokens_generated as f32,
            self.pod_type as u8 as f32,
            f32::from(self.accelerator_class),
        ];
    }

    fn kv(&self) -> f32 {
        if self.kv_cache_percentage.is_nan() {
            0.0
        } else {
            self.kv_cache_percentage.clamp(0.0, 1.0)
        }
    }
}

/// Stable small codes for accelerator/variant labels (e.g. `nvidia-h100`, `nvidia-l4`): a label keeps
/// its code for the life of the model, so a tree's split on the code stays meaningful. Code 0 is
/// "unlabelled". Codes are handed out when an endpoint is added, not per request.
#[derive(Debug, Clone, Default)]
pub struct AcceleratorClasses {
    labels: Vec<String>,
}

impl AcceleratorClasses {
    /// The code for `label`, assigning the next one to a new label; an empty label is 0.
    pub fn code(&mut self, label: &str) -> u16 {
        if label.is_empty() {
            return 0;
        }
        if let Some(i) = self.labels.iter().position(|l| l == label) {
            return i as u16 + 1;
        }
        self.labels.push(label.to_owned());
        self.labels.len().min(u16::MAX as usize) as u16
    }

    /// The label of a code, if it has one.
    pub fn label(&self, code: u16) -> Option<&str> {
        self.labels.get(usize::from(code).checked_sub(1)?).map(String::as_str)
    }
}

/// The accelerator class code of a label value: a hash into 1..=4093 (0 is "unlabelled").
///
/// Why a hash rather than [`AcceleratorClasses`]' order of arrival: the code must mean the same class in
/// every process that uses the model (a model saved by one epp and loaded by the next, or seeded from the
/// lab), whatever order the endpoints appeared in. Codes stay below 2^24, so they are exact in an f32
/// feature column; a collision between two labels only merges their classes.
pub fn accelerator_code(label: &str) -> u16 {
    if label.is_empty() {
        return 0;
    }
    // FNV-1a, 64-bit.
    let hash =
        label.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (hash % 4093) as u16 + 1
}

#[cfg(test)]
mod tests {
    #[test]
    fn accelerator_codes_are_stable_hashes() {
        assert_eq!(accelerator_code(""), 0);
        let (h100, l4) = (accelerator_code("nvidia-h100"), accelerator_code("nvidia-l4"));
        assert_ne!(h100, l4);
        assert!((1..=4093).contains(&h100) && (1..=4093).contains(&l4));
        assert_eq!(h100, accelerator_code("nvidia-h100"), "same label, same code");
    }

    use super::*;

    #[test]
    fn ttft_row_derives_llmd_features() {
        let obs = Observation {
            kv_cache_percentage: 1.5,
            input_tokens: 1000,
            waiting: 2,
            running: 7,
            prefix_cache_score: 0.75,
            encoder_matched_size: 9,
            encoder_input_size: 4,
            pod_type: PodType::Decode,
            accelerator_class: 3,
            ..Observation::default()
        };
        let mut row = [0.0; 16];
        obs.ttft_row(&mut row);
        let at = |name| TTFT_COLUMNS.iter().position(|c| *c == name).unwrap();
        let column = |row: &[f32; 16], name| row[at(name)];
        assert_eq!(column(&row, "is_queued"), 1.0);
        assert_eq!(column(&row, "kv_cache_percentage"), 1.0, "clamped to 0–1");
        assert_eq!(column(&row, "effective_input_tokens"), 250.0);
        assert_eq!(column(&row, "prefill_score_bucket"), 3.0);
        assert_eq!(column(&row, "encoder_matched_size"), 4.0, "matched never exceeds input");
        assert_eq!(column(&row, "pod_type"), 2.0);
        assert_eq!(column(&row, "accelerator_class"), 3.0);
        let full_prefix = Observation { prefix_cache_score: 1.0, ..obs };
        full_prefix.ttft_row(&mut row);
        assert_eq!(column(&row, "prefill_score_bucket"), 3.0);
        let nan_prefix = Observation { prefix_cache_score: f32::NAN, waiting: 0, ..obs };
        nan_prefix.ttft_row(&mut row);
        assert_eq!((column(&row, "prefix_cache_score"), column(&row, "is_queued")), (0.0, 0.0));
    }

    #[test]
    fn uncached_tokens_are_the_prompt_outside_the_prefix_cache() {
        let obs = Observation { input_tokens: 1000, prefix_cache_score: 0.25, ..Observation::default() };
        assert_eq!(obs.uncached_tokens(), 750);
        assert_eq!(Observation { prefix_cache_score: f32::NAN, ..obs }.uncached_tokens(), 1000);
        assert_eq!(Observation { prefix_cache_score: 1.5, ..obs }.uncached_tokens(), 0);
    }

    #[test]
    fn tpot_row_has_the_tpot_columns() {
        let obs =
            Observation { tokens_generated: 1, running: 4, accelerator_class: 2, ..Observation::default() };
        let mut row = [0.0; 10];
        obs.tpot_row(&mut row);
        assert_eq!(row, [0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 1.0, 0.0, 2.0]);
    }

    #[test]
    fn accelerator_codes_are_stable() {
        let mut classes = AcceleratorClasses::default();
        assert_eq!(classes.code(""), 0);
        assert_eq!(classes.code("nvidia-h100"), 1);
        assert_eq!(classes.code("nvidia-l4"), 2);
        assert_eq!(classes.code("nvidia-h100"), 1);
        assert_eq!(classes.label(2), Some("nvidia-l4"));
        assert_eq!(classes.label(0), None);
    }
}
