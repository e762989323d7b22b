//! The fake API server's state: objects, one global resourceVersion counter (as etcd's revision), the
//! event log watches resume from, and the open watches.
//!
//! Semantics follow the real API server closely enough for a client's informer logic to be exercised:
//! - every write bumps the resourceVersion and stamps it on the object;
//! - a watch from resourceVersion N replays logged events after N, then streams live ones; N older than
//!   the compaction point gets a `410 Gone` ERROR event (`Expired`), as after etcd compaction;
//! - on a label-selector watch an object that starts matching arrives as ADDED and one that stops
//!   matching as DELETED (the watch cache's filtering);
//! - tests can lose events on purpose: a dropped event changes the object but is neither logged nor sent,
//!   so only a relist reveals it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

/// A collection: `pods` (core) or `inferencepools.<group>`.
pub(super) type Resource = String;

/// Equality label selector and `metadata.name` field selector of a list or watch call.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    pub labels: Vec<(String, String)>,
    pub name: Option<String>,
}

impl Selectors {
    /// Parses `labelSelector` (`k=v,k2==v2`) and `fieldSelector` (`metadata.name=x`).
    pub fn parse(label_selector: Option<&str>, field_selector: Option<&str>) -> Result<Self, String> {
        let mut labels = Vec::new();
        for term in label_selector.unwrap_or_default().split(',').filter(|t| !t.is_empty()) {
            let (k, v) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .ok_or(format!("bad selector {term}"))?;
            labels.push((k.to_string(), v.to_string()));
        }
        let mut name = None;
        for term in field_selector.unwrap_or_default().split(',').filter(|t| !t.is_empty()) {
            match term.split_once('=') {
                Some(("metadata.name", v)) => name = Some(v.to_string()),
                _ => return Err(format!("unsupported field selector {term}")),
            }
        }
        Ok(Self { labels, name })
    }

    pub fn matches(&self, object: &Value) -> bool {
        let meta = &object["metadata"];
        self.name.as_deref().is_none_or(|n| meta["name"].as_str() == Some(n))
            && self.labels.iter().all(|(k, v)| meta["labels"][k].as_str() == Some(v.as_str()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug, Clone)]
struct Event {
    rv: u64,
    change: Change,
    resource: Resource,
    namespace: String,
    old: Option<Value>,
    new: Value,
}

/// One open watch: what it watches and where its stream's lines go.
#[derive(Debug)]
pub struct Watcher {
    pub resource: Resource,
    pub namespace: String,
    pub selectors: Selectors,
    pub bookmarks: bool,
    pub lines: UnboundedSender<Bytes>,
}

/// Objects, log and watches.
#[derive(Debug, Default)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<(Resource, String, String), Value>,
    log: VecDeque<Event>,
    /// Watches from a resourceVersion below this get 410.
    compacted: u64,
    watchers: Vec<Watcher>,
    drop_next: usize,
    /// Collections whose CRD is not installed: every call on them answers 404.
    uninstalled: BTreeSet<Resource>,
}

/// One watch stream line: `{"type": …, "object": …}\n`.
pub(super) fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// A `Status` object (errors, and the 410 ERROR event).
pub(super) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

impl Store {
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Creates or replaces an object (ADDED or MODIFIED).
    pub fn apply(&mut self, resource: &str, namespace: &str, mut object: Value) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        self.rv += 1;
        object["metadata"]["namespace"] = json!(namespace);
        object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{name}-{}", self.rv));
        }
        let key = (resource.to_string(), namespace.to_string(), name);
        let old = self.objects.insert(key, object.clone());
        let change = if old.is_some() { Change::Modified } else { Change::Added };
        self.record(Event {
            rv: self.rv,
            change,
            resource: resource.into(),
            namespace: namespace.into(),
            old,
            new: object,
        });
    }

    /// Deletes an object (DELETED); false when it did not exist.
    pub fn delete(&mut self, resource: &str, namespace: &str, name: &str) -> bool {
        let Some(mut object) = self.objects.remove(&(resource.into(), namespace.into(), name.into())) else {
            return false;
        };
        self.rv += 1;
        object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let old = Some(object.clone());
        self.record(Event {
            rv: self.rv,
            change: Change::Deleted,
            resource: resource.into(),
            namespace: namespace.into(),
            old,
            new: object,
        });
        true
    }

    /// The object, if present.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.objects.get(&(resource.into(), namespace.into(), name.into())).cloned()
    }

    /// Uninstalls (`false`) or reinstalls (`true`) the CRD of `resource`: while uninstalled every call
    /// on it answers 404, and its open watches end, as when a CRD is deleted.
    pub fn set_installed(&mut self, resource: &str, installed: bool) {
        if installed {
            self.uninstalled.remove(resource);
        } else {
            self.uninstalled.insert(resource.to_string());
            self.watchers.retain(|w| w.resource != resource);
        }
    }

    pub fn is_installed(&self, resource: &str) -> bool {
        !self.uninstalled.contains(resource)
    }

    /// The next `n` events are lost: objects change, watches and the log never hear of it.
    pub fn drop_next_events(&mut self, n: usize) {
        self.drop_next += n;
    }

    /// Forgets the log: a watch resuming from before now gets 410.
    pub fn compact(&mut self) {
        self.log.clear();
        self.compacted = self.rv;
    }

    /// Ends every open watch stream cleanly (as the server's watch timeout does).
    pub fn close_watches(&mut self) {
        self.watchers.clear();
    }

    /// Sends a BOOKMARK with the current resourceVersion to every watch that asked for bookmarks.
    pub fn bookmark(&mut self) {
        let rv = self.rv.to_string();
        self.watchers.retain(|w| {
            !w.bookmarks || {
                let object =
                    json!({"kind": "Bookmark", "apiVersion": "v1", "metadata": {"resourceVersion": rv}});
                w.lines.send(line("BOOKMARK", &object)).is_ok()
            }
        });
    }

    /// The matching objects and the current resourceVersion.
    pub fn list(&self, resource: &str, namespace: &str, selectors: &Selectors) -> (Vec<Value>, u64) {
        let items = self
            .objects
            .iter()
            .filter(|((r, ns, _), o)| r == resource && ns == namespace && selectors.matches(o))
            .map(|(_, o)| o.clone())
            .collect();
        (items, self.rv)
    }

    /// Opens a watch from `from` (None or 0: the current objects as ADDED first). A too-old `from`
    /// sends the 410 ERROR event and does not register the watch (its stream ends).
    pub fn watch(&mut self, watcher: Watcher, from: Option<u64>) {
        match from.filter(|rv| *rv > 0) {
            Some(rv) if rv < self.compacted => {
                let message = format!("too old resource version: {rv} ({})", self.compacted);
                let _ = watcher.lines.send(line("ERROR", &status(410, "Expired", &message)));
                return;
            }
            Some(rv) => {
                for event in self.log.iter().filter(|e| e.rv > rv) {
                    send(&watcher, event);
                }
            }
            None => {
                let (items, _) = self.list(&watcher.resource, &watcher.namespace, &watcher.selectors);
                for item in items {
                    let _ = watcher.lines.send(line("ADDED", &item));
                }
            }
        }
        self.watchers.push(watcher);
    }

    fn record(&mut self, event: Event) {
        if self.drop_next > 0 {
            self.drop_next -= 1;
            return;
        }
        self.watchers.retain(|w| send(w, &event));
        self.log.push_back(event);
    }
}

/// Sends `event` to `w` as the selector sees it; false when the watch's stream is gone.
fn send(w: &Watcher, event: &Event) -> bool {
    if w.resource != event.resource || w.namespace != event.namespace {
        return true;
    }
    let was = event.old.as_ref().is_some_and(|o| w.selectors.matches(o));
    let is = w.selectors.matches(&event.new);
    let kind = match (event.change, was, is) {
        (Change::Deleted, true, _) => "DELETED",
        (Change::Deleted, false, _) => return true,
        (_, false, true) => "ADDED",
        (_, true, true) => "MODIFIED",
        (_, true, false) => "DELETED",
        (_, false, false) => return true,
    };
    w.lines.send(line(kind, &event.new)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn pod(name: &str, app: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"app": app}}})
    }

    fn watcher(selector: &str) -> (Watcher, UnboundedReceiver<Bytes>) {
        let (lines, rx) = unbounded_channel();
        let selectors = Selectors::parse(Some(selector), None).unwrap();
        (Watcher { resource: "pods".into(), namespace: "ns".into(), selectors, bookmarks: true, lines }, rx)
    }

    /// `(type, name)` of each line received so far.
    fn events(rx: &mut UnboundedReceiver<Bytes>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Ok(line) = rx.try_recv() {
            let v: Value = serde_json::from_slice(&line).unwrap();
            let name = v["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string();
            out.push((v["type"].as_str().unwrap().to_string(), name));
        }
        out
    }

    fn pair(kind: &str, name: &str) -> (String, String) {
        (kind.to_string(), name.to_string())
    }

    #[test]
    fn a_selector_watch_sees_objects_enter_and_leave() {
        let mut store = Store::default();
        let (w, mut rx) = watcher("app=vllm");
        store.watch(w, Some(0));
        store.apply("pods", "ns", pod("a", "vllm"));
        store.apply("pods", "ns", pod("a", "vllm"));
        store.apply("pods", "ns", pod("a", "other"));
        store.apply("pods", "ns", pod("a", "vllm"));
        store.apply("pods", "other-ns", pod("b", "vllm"));
        assert!(store.delete("pods", "ns", "a"));
        let want = [
            pair("ADDED", "a"),
            pair("MODIFIED", "a"),
            pair("DELETED", "a"),
            pair("ADDED", "a"),
            pair("DELETED", "a"),
        ];
        assert_eq!(events(&mut rx), want);
    }

    #[test]
    fn resuming_replays_the_log_and_compaction_answers_410() {
        let mut store = Store::default();
        store.apply("pods", "ns", pod("a", "vllm"));
        let rv = store.resource_version();
        store.apply("pods", "ns", pod("b", "vllm"));
        let (w, mut rx) = watcher("app=vllm");
        store.watch(w, Some(rv));
        assert_eq!(events(&mut rx), [pair("ADDED", "b")]);
        store.compact();
        let (w, mut rx) = watcher("app=vllm");
        store.watch(w, Some(rv));
        let line: Value = serde_json::from_slice(&rx.try_recv().unwrap()).unwrap();
        assert_eq!((line["type"].as_str(), line["object"]["code"].as_u64()), (Some("ERROR"), Some(410)));
    }

    #[test]
    fn dropped_events_change_objects_silently() {
        let mut store = Store::default();
        let (w, mut rx) = watcher("app=vllm");
        store.watch(w, None);
        store.apply("pods", "ns", pod("a", "vllm"));
        store.drop_next_events(1);
        assert!(store.delete("pods", "ns", "a"));
        assert_eq!(events(&mut rx), [pair("ADDED", "a")]);
        assert!(store.list("pods", "ns", &Selectors::default()).0.is_empty());
    }

    #[test]
    fn selectors_parse_equality_and_names() {
        let s = Selectors::parse(Some("app==vllm,tier=gpu"), Some("metadata.name=a")).unwrap();
        assert!(s.matches(&json!({"metadata": {"name": "a", "labels": {"app": "vllm", "tier": "gpu"}}})));
        assert!(!s.matches(&json!({"metadata": {"name": "b", "labels": {"app": "vllm", "tier": "gpu"}}})));
        assert!(Selectors::parse(Some("app"), None).is_err());
        assert!(Selectors::parse(None, Some("spec.nodeName=x")).is_err());
    }
}
