//! The lab's tests, one binary (the lab and the product linked once): whole runs and their reports
//! (`runs`), the virtual-time predictor's determinism (`predicted`), and the scenario suite's inputs
//! (`scenarios`), precise prefix routing fed the engines' KV events with several epp replicas
//! (`precise`), and prefill/decode disaggregation (`pd`).

mod pd;
mod precise;
mod predicted;
mod runs;
mod scenarios;
