//! Writes through the API: create (POST to the collection) and update (PUT to the object) with the real
//! API server's optimistic concurrency: an update must carry the object's current resourceVersion, or it
//! is refused with 409 Conflict, which is what makes a Lease a lock (leader election's candidates race
//! with get-then-update, and only one update of a given version wins).

use serde_json::{json, Value};

use super::store::Store;

/// Why a write was refused, with the HTTP status the API server answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("the object has been modified; please apply your changes to the latest version and try again")]
    Conflict,
    #[error("metadata.name {got:?} does not match the path's {want:?}")]
    NameMismatch { got: String, want: String },
}

impl WriteError {
    /// The status code and `reason` of the API server's answer.
    pub fn status(&self) -> (u16, &'static str) {
        match self {
            Self::AlreadyExists(_) => (409, "AlreadyExists"),
            Self::NotFound(_) => (404, "NotFound"),
            Self::Conflict => (409, "Conflict"),
            Self::NameMismatch { .. } => (400, "BadRequest"),
        }
    }
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

/// POST: stores a new object (ADDED); refused when the name is taken.
pub(super) fn create(
    store: &mut Store,
    resource: &str,
    namespace: &str,
    object: Value,
) -> Result<Value, WriteError> {
    let name = name_of(&object);
    if store.get(resource, namespace, &name).is_some() {
        return Err(WriteError::AlreadyExists(name));
    }
    store.apply(resource, namespace, object);
    store.get(resource, namespace, &name).ok_or(WriteError::NotFound(name))
}

/// PUT: replaces `name` (MODIFIED) if `object` carries its current resourceVersion (or none, which the
/// real server takes as an unconditional update).
pub(super) fn update(
    store: &mut Store,
    resource: &str,
    namespace: &str,
    name: &str,
    mut object: Value,
) -> Result<Value, WriteError> {
    let got = name_of(&object);
    if got != name {
        return Err(WriteError::NameMismatch { got, want: name.to_string() });
    }
    let current = store.get(resource, namespace, name).ok_or_else(|| WriteError::NotFound(name.into()))?;
    let sent = &object["metadata"]["resourceVersion"];
    if !sent.is_null() && *sent != current["metadata"]["resourceVersion"] {
        return Err(WriteError::Conflict);
    }
    object["metadata"]["uid"] = current["metadata"]["uid"].clone();
    if object["metadata"]["creationTimestamp"].is_null() {
        object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    store.apply(resource, namespace, object);
    store.get(resource, namespace, name).ok_or_else(|| WriteError::NotFound(name.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(rv: Option<&str>, holder: &str) -> Value {
        let mut o = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "l"}, "spec": {"holderIdentity": holder}});
        if let Some(rv) = rv {
            o["metadata"]["resourceVersion"] = json!(rv);
        }
        o
    }

    #[test]
    fn create_then_conflicting_updates() {
        let mut store = Store::default();
        let created = create(&mut store, "leases", "ns", lease(None, "a")).unwrap();
        assert_eq!(
            create(&mut store, "leases", "ns", lease(None, "b")),
            Err(WriteError::AlreadyExists("l".into()))
        );
        let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        // Two candidates read the same version; the first update wins, the second gets 409.
        update(&mut store, "leases", "ns", "l", lease(Some(&rv), "b")).unwrap();
        assert_eq!(update(&mut store, "leases", "ns", "l", lease(Some(&rv), "c")), Err(WriteError::Conflict));
        assert_eq!(store.get("leases", "ns", "l").unwrap()["spec"]["holderIdentity"], "b");
        assert_eq!(
            update(&mut store, "leases", "ns", "gone", lease(None, "x")).map_err(|e| e.status().0),
            Err(400)
        );
    }
}
