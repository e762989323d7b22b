//! The pool's endpoints and the latest telemetry of each.
//!
//! Endpoints are held in an [`arc_swap::ArcSwap`] list that discovery replaces as a whole; each endpoint's
//! telemetry sits in its own `ArcSwap` that its scraper replaces every refresh. Readers on the request path
//! never take a lock: they load the list once and each endpoint's metrics once, and schedule over that
//! immutable view. Each endpoint also carries its circuit breaker ([`EndpointHealth`]), fed by the outcomes
//! of the requests routed to it.

mod endpoint;
mod health;
mod pool;
mod role;
mod subset;

pub use endpoint::{format_host_port, Endpoint, EndpointTelemetry, TelemetryCache, TelemetrySource};
pub use health::{
    BreakerPolicy, BreakerState, EjectionReason, EndpointHealth, Outcome, Transition, RATE_WINDOW_REQUESTS,
};
pub use pool::{Datastore, EndpointChanges};
pub use role::{PodRole, ROLE_LABEL};
pub use subset::{locate, InvalidSubsetEntry, SubsetEntry, SubsetHint, SubsetMatch};
