//! TokenReview and SubjectAccessReview as the API server answers them (`POST
//! /apis/authentication.k8s.io/v1/tokenreviews`, `/apis/authorization.k8s.io/v1/subjectaccessreviews`):
//! a token the test registers authenticates as its user and groups; any other is not authenticated; a
//! user, or one of its groups, may `verb` a non-resource path the test granted it (a path ending in `*`
//! matches by prefix, as RBAC's `nonResourceURLs` do). What a real API server adds: token audiences and
//! expiry, and RBAC's aggregation of roles and bindings; the questions and answers are the same objects.

use std::collections::HashMap;

use serde_json::{json, Value};

/// The tokens and grants the test set up.
#[derive(Debug, Default)]
pub struct Reviews {
    tokens: HashMap<String, (String, Vec<String>)>,
    grants: Vec<(String, String, String)>,
}

impl Reviews {
    /// `token` authenticates as `user` in `groups`.
    pub fn add_token(&mut self, token: &str, user: &str, groups: &[&str]) {
        let groups = groups.iter().map(|g| (*g).to_string()).collect();
        self.tokens.insert(token.to_string(), (user.to_string(), groups));
    }

    /// `subject` (a user or a group) may `verb` the non-resource `path`.
    pub fn grant(&mut self, subject: &str, verb: &str, path: &str) {
        self.grants.push((subject.to_string(), verb.to_string(), path.to_string()));
    }

    pub(super) fn token_review(&self, review: &Value) -> Value {
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let status = match self.tokens.get(token) {
            Some((user, groups)) => json!({"authenticated": true,
                "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}}),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
               "spec": review["spec"], "status": status})
    }

    pub(super) fn access_review(&self, review: &Value) -> Value {
        let spec = &review["spec"];
        let user = spec["user"].as_str().unwrap_or_default();
        let groups: Vec<&str> =
            spec["groups"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let path = spec["nonResourceAttributes"]["path"].as_str().unwrap_or_default();
        let verb = spec["nonResourceAttributes"]["verb"].as_str().unwrap_or_default();
        let allowed = self.grants.iter().any(|(subject, v, p)| {
            (subject == user || groups.contains(&subject.as_str()))
                && (v == verb || v == "*")
                && (p == path || p.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix)))
        });
        let reason = if allowed { "granted by the test" } else { "no grant for this user, verb and path" };
        json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
               "spec": spec, "status": {"allowed": allowed, "reason": reason}})
    }
}
