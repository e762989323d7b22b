//! The lab's tests, one binary (the lab and the product linked once): whole runs and their reports
//! (`runs`), the virtual-time predictor's determinism (`predicted`), and the scenario suite's inputs
//! (`scenarios`).

mod predicted;
mod runs;
mod scenarios;
