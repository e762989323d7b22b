//! The configured plugin pipeline of one EPP: producers → admitters → profiles (via the profile handler)
//! → pre-request hooks, plus the response hooks. Built once from the config; shared by every request.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;

use super::observer::{ExtensionPoint, Observer};
use super::plugin::{
    Admitter, BuiltPlugin, Completion, DataProducer, DispatchInfo, EndpointListener, PluginId, PreRequest,
    ProfileCycle, ProfileHandler, ResponseHook, TokenProducer,
};
use super::profile::{NoTrace, Profile, ProfileTrace, Scratch};
use super::types::{Candidate, SchedulingError, SchedulingRequest, SchedulingResult};
use crate::datastore::Endpoint;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The whole plugin pipeline.
#[derive(Clone)]
pub struct Pipeline {
    pub profiles: Vec<Profile>,
    pub handler: (PluginId, Arc<dyn ProfileHandler>),
    /// In dependency order (a producer runs after those whose data it consumes).
    pub producers: Vec<(PluginId, Arc<dyn DataProducer>)>,
    pub admitters: Vec<(PluginId, Arc<dyn Admitter>)>,
    pub pre_requests: Vec<(PluginId, Arc<dyn PreRequest>)>,
    pub response_hooks: Vec<(PluginId, Arc<dyn ResponseHook>)>,
    pub endpoint_listeners: Vec<Arc<dyn EndpointListener>>,
    /// Every configured plugin instance, by name, for lookups such as `saturationDetector.pluginRef`.
    pub plugins: Vec<BuiltPlugin>,
    profile_names: Vec<String>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("profiles", &self.profiles)
            .field("handler", &self.handler.0)
            .field("producers", &self.producers.iter().map(|(id, _)| &id.name).collect::<Vec<_>>())
            .field("plugins", &self.plugins.iter().map(|p| &p.id.name).collect::<Vec<_>>())
            .finish()
    }
}

impl Pipeline {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        profiles: Vec<Profile>,
        handler: (PluginId, Arc<dyn ProfileHandler>),
        producers: Vec<(PluginId, Arc<dyn DataProducer>)>,
        admitters: Vec<(PluginId, Arc<dyn Admitter>)>,
        pre_requests: Vec<(PluginId, Arc<dyn PreRequest>)>,
        response_hooks: Vec<(PluginId, Arc<dyn ResponseHook>)>,
        endpoint_listeners: Vec<Arc<dyn EndpointListener>>,
        plugins: Vec<BuiltPlugin>,
    ) -> Self {
        let profile_names = profiles.iter().map(|p| p.name.clone()).collect();
        Self {
            profiles,
            handler,
            producers,
            admitters,
            pre_requests,
            response_hooks,
            endpoint_listeners,
            plugins,
            profile_names,
        }
    }

    /// The configured `token-producer`, if any: the director asks it for each request's token ids.
    pub fn token_producer(&self) -> Option<(&PluginId, &Arc<dyn TokenProducer>)> {
        self.plugins.iter().find_map(|p| p.token_producer.as_ref().map(|t| (&p.id, t)))
    }

    /// Looks up a configured plugin by instance name.
    pub fn plugin(&self, name: &str) -> Option<&BuiltPlugin> {
        self.plugins.iter().find(|p| p.id.name == name)
    }

    /// Runs the data producers over the candidates.
    pub fn prepare(&self, req: &SchedulingRequest<'_>, candidates: &mut [Candidate], obs: &dyn Observer) {
        for (id, p) in &self.producers {
            obs.time(ExtensionPoint::PrepareData, id, &mut || p.prepare(req, candidates));
        }
    }

    /// Runs the admitters; the first denial wins: `(admitter, reason, whether the denial means load)`.
    pub fn admit(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        obs: &dyn Observer,
    ) -> Result<(), (PluginId, String, bool)> {
        self.admit_traced(req, candidates, obs, false, &mut |_, _| {})
    }

    /// [`admit`](Self::admit), telling `verdict` each admitter's answer. With `all`, the admitters after
    /// a denial run too (the route probe shows every verdict); the first denial still wins.
    pub fn admit_traced(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        obs: &dyn Observer,
        all: bool,
        verdict: &mut dyn FnMut(&PluginId, &Result<(), String>),
    ) -> Result<(), (PluginId, String, bool)> {
        let mut denial = None;
        for (id, a) in &self.admitters {
            let mut answer = Ok(());
            obs.time(ExtensionPoint::Admit, id, &mut || answer = a.admit(req, candidates));
            verdict(id, &answer);
            if let Err(reason) = answer {
                denial.get_or_insert_with(|| (id.clone(), reason, a.denial_is_load()));
                if !all {
                    break;
                }
            }
        }
        denial.map_or(Ok(()), Err)
    }

    /// One scheduling cycle over `candidates`: the profile handler chooses profiles until it has none left,
    /// then names the primary result.
    pub fn schedule(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        rng: &mut SmallRng,
        obs: &dyn Observer,
    ) -> Result<SchedulingResult, SchedulingError> {
        self.schedule_traced(req, candidates, rng, obs, &mut NoTrace)
    }

    /// [`schedule`](Self::schedule), telling `trace` each profile's steps (the route probe's explanation).
    pub fn schedule_traced<T: ProfileTrace + ?Sized>(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        rng: &mut SmallRng,
        obs: &dyn Observer,
        trace: &mut T,
    ) -> Result<SchedulingResult, SchedulingError> {
        if candidates.is_empty() {
            return Err(SchedulingError::NoCandidates);
        }
        let (handler_id, handler) = &self.handler;
        let mut done: Vec<String> = Vec::with_capacity(self.profiles.len());
        let mut results = Vec::with_capacity(self.profiles.len());
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            loop {
                let mut next = Vec::new();
                let cycle = ProfileCycle {
                    profiles: &self.profile_names,
                    done: &done,
                    results: &results,
                    candidates,
                };
                obs.time(ExtensionPoint::ProfilePicker, handler_id, &mut || {
                    next = handler.pick_profiles(req, &cycle);
                });
                if next.is_empty() {
                    break;
                }
                for name in next {
                    if done.contains(&name) {
                        return Err(SchedulingError::Handler(format!("profile {name:?} picked twice")));
                    }
                    let profile = self
                        .profiles
                        .iter()
                        .find(|p| p.name == name)
                        .ok_or_else(|| SchedulingError::Handler(format!("unknown profile {name:?}")))?;
                    let mut run = None;
                    obs.profile(&name, &mut || {
                        run = Some(profile.run_traced(req, candidates, rng, &mut scratch, obs, &mut *trace));
                    });
                    let Some(run) = run else {
                        return Err(SchedulingError::Handler(format!("profile {name:?} was not run")));
                    };
                    match run {
                        Ok(result) => results.push((name.clone(), result)),
                        Err(e) if handler.profile_required(&name) => return Err(e),
                        // An optional stage that found no endpoint: the cycle goes on without it.
                        Err(_) => {}
                    }
                    done.push(name);
                }
            }
            Ok(())
        })?;
        let mut primary = Err(String::new());
        obs.time(ExtensionPoint::ProcessProfilesResults, handler_id, &mut || {
            primary = handler.primary_profile(&results);
        });
        let primary_profile = primary.map_err(SchedulingError::Handler)?;
        let mut result =
            SchedulingResult { profile_results: results, primary_profile, extras: Default::default() };
        result.extras = handler.extras(&result);
        Ok(result)
    }

    pub fn pre_request(
        &self,
        req: &SchedulingRequest<'_>,
        result: &SchedulingResult,
        info: &DispatchInfo,
        obs: &dyn Observer,
    ) {
        for (id, p) in &self.pre_requests {
            obs.time(ExtensionPoint::PreRequest, id, &mut || p.pre_request(req, result, info));
        }
    }

    pub fn on_response_headers(
        &self,
        info: &DispatchInfo,
        status: Option<u16>,
        served: Option<&str>,
        set_headers: &mut Vec<(String, String)>,
        obs: &dyn Observer,
    ) {
        for (id, h) in &self.response_hooks {
            obs.time(ExtensionPoint::ResponseReceived, id, &mut || {
                h.on_response_headers(info, status, served, set_headers);
            });
        }
    }

    pub fn on_response_chunk(
        &self,
        info: &DispatchInfo,
        chunk: &[u8],
        first: bool,
        now: Instant,
        obs: &dyn Observer,
    ) {
        for (id, h) in self.response_chunk_hooks() {
            obs.time(ExtensionPoint::ResponseStreaming, id, &mut || {
                h.on_response_chunk(info, chunk, first, now);
            });
        }
    }

    /// The response hooks called for each chunk of an answer (`ResponseHook::handles_response_chunks`).
    pub fn response_chunk_hooks(&self) -> impl Iterator<Item = &(PluginId, Arc<dyn ResponseHook>)> {
        self.response_hooks.iter().filter(|(_, h)| h.handles_response_chunks())
    }

    /// The plugins that learn from the answer's chunks (`ResponseHook::reads_answer_chunks`).
    pub fn answer_chunk_readers(&self) -> impl Iterator<Item = &str> {
        self.response_hooks.iter().filter(|(_, h)| h.reads_answer_chunks()).map(|(id, _)| id.name.as_str())
    }

    pub fn on_complete(&self, info: &DispatchInfo, completion: &Completion) {
        for (_, h) in &self.response_hooks {
            h.on_complete(info, completion);
        }
    }

    pub fn on_endpoints_removed(&self, removed: &[Arc<Endpoint>]) {
        if removed.is_empty() {
            return;
        }
        for l in &self.endpoint_listeners {
            l.on_endpoints_removed(removed);
        }
    }
}
