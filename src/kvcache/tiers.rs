//! The storage tiers a block can be held in (GPU, CPU, storage) and what each is worth to a match.

/// `kvCacheBackendConfigs`: a weight per tier name (`gpu` 1.0 and `cpu` 0.8 by default, as llm-d).
#[derive(Debug, Clone, PartialEq)]
pub struct TierWeights(pub Vec<(String, f64)>);

impl Default for TierWeights {
    fn default() -> Self {
        Self(vec![("gpu".into(), 1.0), ("cpu".into(), 0.8)])
    }
}

impl TierWeights {
    /// The tier of an event's `medium`: vLLM's `GPU`/`CPU`/`STORAGE`, SGLang's `CPU_PINNED`/`DISK`.
    pub(crate) fn tier(&self, medium: Option<&str>) -> u8 {
        let name = match medium.map(str::to_ascii_lowercase).as_deref() {
            None | Some("gpu") => "gpu".to_string(),
            Some("cpu" | "cpu_pinned") => "cpu".to_string(),
            Some("disk") => "storage".to_string(),
            Some(other) => other.to_string(),
        };
        // Tiers past the 255th share the "unknown tier" slot (weight 0).
        self.0
            .iter()
            .position(|(tier, _)| *tier == name)
            .and_then(|i| u8::try_from(i).ok())
            .unwrap_or(u8::MAX)
    }

    pub(crate) fn weight(&self, tier: u8) -> f64 {
        self.0.get(usize::from(tier)).map_or(0.0, |(_, weight)| *weight)
    }

    /// The tier with the highest weight (the first of equals), and that weight.
    pub(crate) fn best(&self) -> (u8, f64) {
        let mut best = (u8::MAX, 0.0);
        for (i, (_, weight)) in self.0.iter().enumerate().take(usize::from(u8::MAX)) {
            if best.0 == u8::MAX || *weight > best.1 {
                best = (i as u8, *weight);
            }
        }
        best
    }
}
