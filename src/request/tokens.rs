/// Token estimator (work in progress).
#[derive(Debug, Clone, Copy)]
pub struct TokenEstimator;
