//! A fake Kubernetes API server on 127.0.0.1 that speaks the real list/watch protocol, for driving
//! epp's discovery through the real kube-rs client: no real cluster exists where the tests run.
//!
//! It serves namespaced collections (`/api/v1/namespaces/{ns}/pods`,
//! `/apis/{group}/{version}/namespaces/{ns}/{plural}`): a list answers the matching objects with the
//! collection's resourceVersion; `?watch=true` answers a chunked stream of JSON lines (ADDED, MODIFIED,
//! DELETED, BOOKMARK, ERROR with 410 for a compacted resourceVersion) that ends at `timeoutSeconds`.
//! Tests change the objects, lose events on purpose, compact the log, close the watches, and make the
//! server go away (connections reset, port refused, or accepted and never answered) and come back on
//! the same port. Objects can also be read, created and updated through the API (`GET`/`PUT` on
//! `.../{plural}/{name}`, `POST` on the collection) with resourceVersion conflicts answered 409, as
//! leader election's Lease needs ([`writes`]). A collection can be marked uninstalled (its CRD absent:
//! 404 on every call). [`objects`] builds pod, InferencePool, InferenceObjective,
//! InferenceModelRewrite and Lease objects. TokenReview and SubjectAccessReview are answered from the
//! tokens and grants the test sets ([`reviews`]).

pub mod objects;
mod reviews;
mod store;
mod writes;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tokio_stream::wrappers::UnboundedReceiverStream;

pub use reviews::Reviews;
pub use store::{Selectors, Store};
pub use writes::WriteError;

/// The core pods collection.
pub const PODS: &str = "pods";

/// The coordination.k8s.io Lease collection (leader election).
pub const LEASES: &str = "leases.coordination.k8s.io";

/// The InferencePool collection of `group` (the store's resource name; any version is served from it).
pub fn inference_pools(group: &str) -> String {
    format!("inferencepools.{group}")
}

/// The InferenceObjective collection of `group`.
pub fn inference_objectives(group: &str) -> String {
    format!("inferenceobjectives.{group}")
}

/// The InferenceModelRewrite collection of `group`.
pub fn inference_model_rewrites(group: &str) -> String {
    format!("inferencemodelrewrites.{group}")
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The running server's tasks: the accept loop and one task per connection.
struct Serving {
    accept: JoinHandle<()>,
    connections: Arc<Mutex<JoinSet<()>>>,
}

/// The fake API server. Dropping it stops it.
pub struct FakeKubeApi {
    addr: SocketAddr,
    store: Arc<Mutex<Store>>,
    serving: Mutex<Option<Serving>>,
    requests: Arc<Mutex<Vec<String>>>,
    reviews: Arc<Mutex<Reviews>>,
}

impl FakeKubeApi {
    /// Starts on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let api = Self {
            addr,
            store: Arc::default(),
            serving: Mutex::new(None),
            requests: Arc::default(),
            reviews: Arc::default(),
        };
        *lock(&api.serving) = Some(api.serve(listener));
        Ok(api)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes a kubeconfig pointing at this server (plain HTTP, no credentials) into `dir`.
    pub fn write_kubeconfig(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    \
             user: fake\n    namespace: default\ncurrent-context: fake\n",
            self.addr
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// The store, to change objects or the log directly.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// The tokens and grants TokenReview and SubjectAccessReview answer from.
    pub fn reviews(&self) -> MutexGuard<'_, Reviews> {
        lock(&self.reviews)
    }

    /// Creates or replaces `object` in `resource` / `namespace`.
    pub fn apply(&self, resource: &str, namespace: &str, object: Value) {
        self.store().apply(resource, namespace, object);
    }

    /// Deletes an object; false when there was none.
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> bool {
        self.store().delete(resource, namespace, name)
    }

    /// The requests served so far, as `METHOD path?query`.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.requests).clone()
    }

    /// How many list calls (not watches) were made on paths ending with `suffix`.
    pub fn list_calls(&self, suffix: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| !r.contains("watch=true") && r.split('?').next().is_some_and(|p| p.ends_with(suffix)))
            .count()
    }

    /// Goes away: the port refuses connections, open connections (watches included) are reset.
    pub fn stop(&self) {
        if let Some(serving) = lock(&self.serving).take() {
            serving.accept.abort();
            lock(&serving.connections).abort_all();
        }
        self.store().close_watches();
    }

    /// Stops, and waits until the port is released (an aborted task drops its listener only when the
    /// runtime next runs it).
    async fn stop_and_release(&self) {
        let serving = lock(&self.serving).take();
        self.store().close_watches();
        if let Some(serving) = serving {
            serving.accept.abort();
            lock(&serving.connections).abort_all();
            let _ = serving.accept.await;
        }
    }

    /// Comes back on the same port with the same objects.
    pub async fn restart(&self) -> std::io::Result<()> {
        self.stop_and_release().await;
        let listener = TcpListener::bind(self.addr).await?;
        *lock(&self.serving) = Some(self.serve(listener));
        Ok(())
    }

    /// Comes back on the same port as a black hole: connections are accepted and never answered, as
    /// behind a network partition that drops packets instead of refusing them.
    pub async fn restart_unresponsive(&self) -> std::io::Result<()> {
        self.stop_and_release().await;
        let listener = TcpListener::bind(self.addr).await?;
        let connections: Arc<Mutex<JoinSet<()>>> = Arc::default();
        let conns = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                lock(&conns).spawn(async move {
                    let _held = stream;
                    std::future::pending::<()>().await;
                });
            }
        });
        *lock(&self.serving) = Some(Serving { accept, connections });
        Ok(())
    }

    fn serve(&self, listener: TcpListener) -> Serving {
        let connections: Arc<Mutex<JoinSet<()>>> = Arc::default();
        let shared = Shared {
            store: self.store.clone(),
            requests: self.requests.clone(),
            reviews: self.reviews.clone(),
        };
        let conns = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                let service = hyper::service::service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(handle(&shared, req).await) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                lock(&conns).spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Serving { accept, connections }
    }
}

impl Drop for FakeKubeApi {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `(resource, namespace, apiVersion, object name)` of a collection path (no name) or an object path.
fn collection(path: &str) -> Option<(String, String, String, Option<String>)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (resource, ns, api_version, name) = match parts.as_slice() {
        ["api", "v1", "namespaces", ns, plural, rest @ ..] => {
            (plural.to_string(), ns, "v1".to_string(), rest)
        }
        ["apis", group, version, "namespaces", ns, plural, rest @ ..] => {
            (format!("{plural}.{group}"), ns, format!("{group}/{version}"), rest)
        }
        _ => return None,
    };
    match name {
        [] => Some((resource, ns.to_string(), api_version, None)),
        [name] => Some((resource, ns.to_string(), api_version, Some(name.to_string()))),
        _ => None,
    }
}

/// What every connection's handler shares.
#[derive(Clone)]
struct Shared {
    store: Arc<Mutex<Store>>,
    requests: Arc<Mutex<Vec<String>>>,
    reviews: Arc<Mutex<Reviews>>,
}

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let store = &*shared.store;
    let uri = req.uri().clone();
    let method = req.method().clone();
    lock(&shared.requests).push(format!("{method} {uri}"));
    if method == hyper::Method::POST && (uri.path() == TOKEN_REVIEWS || uri.path() == ACCESS_REVIEWS) {
        let body =
            req.into_body().collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
        let Ok(review) = serde_json::from_slice::<Value>(&body) else {
            return json_reply(StatusCode::BAD_REQUEST, &store::status(400, "BadRequest", "not a review"));
        };
        let reviews = lock(&shared.reviews);
        let answer = if uri.path() == TOKEN_REVIEWS {
            reviews.token_review(&review)
        } else {
            reviews.access_review(&review)
        };
        return json_reply(StatusCode::CREATED, &answer);
    }
    let Some((resource, namespace, api_version, name)) = collection(uri.path()) else {
        return json_reply(StatusCode::NOT_FOUND, &store::status(404, "NotFound", "no such collection"));
    };
    if !lock(store).is_installed(&resource) {
        let message = "the server could not find the requested resource";
        return json_reply(StatusCode::NOT_FOUND, &store::status(404, "NotFound", message));
    }
    if method != hyper::Method::GET || name.is_some() {
        return object_call(store, req, &resource, &namespace, name.as_deref()).await;
    }
    let query: Vec<(String, String)> = uri.query().map(url_pairs).unwrap_or_default();
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let selectors = match Selectors::parse(param("labelSelector"), param("fieldSelector")) {
        Ok(s) => s,
        Err(e) => return json_reply(StatusCode::BAD_REQUEST, &store::status(400, "BadRequest", &e)),
    };
    if param("watch") == Some("true") || param("watch") == Some("1") {
        let from = param("resourceVersion").and_then(|rv| rv.parse().ok());
        let timeout = param("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(290);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let watcher = store::Watcher {
            resource,
            namespace,
            selectors,
            bookmarks: param("allowWatchBookmarks") == Some("true"),
            lines: tx,
        };
        lock(store).watch(watcher, from);
        let lines = UnboundedReceiverStream::new(rx)
            .take_until(tokio::time::sleep(Duration::from_secs(timeout)))
            .map(|line| Ok::<_, Infallible>(Frame::data(line)));
        let body = StreamBody::new(lines).boxed_unsync();
        return Response::builder()
            .header("content-type", "application/json")
            .body(body)
            .unwrap_or_else(|_| Response::new(empty()));
    }
    let (items, rv) = lock(store).list(&resource, &namespace, &selectors);
    let list = json!({"kind": "List", "apiVersion": api_version,
                      "metadata": {"resourceVersion": rv.to_string()}, "items": items});
    json_reply(StatusCode::OK, &list)
}

/// GET, PUT on an object, POST on a collection.
async fn object_call(
    store: &Mutex<Store>,
    req: Request<Incoming>,
    resource: &str,
    namespace: &str,
    name: Option<&str>,
) -> Response<Body> {
    let method = req.method().clone();
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return json_reply(StatusCode::BAD_REQUEST, &store::status(400, "BadRequest", &e.to_string()))
        }
    };
    let object = || serde_json::from_slice::<Value>(&body).map_err(|e| e.to_string());
    let result = match (method.as_str(), name) {
        ("GET", Some(name)) => {
            lock(store).get(resource, namespace, name).ok_or_else(|| WriteError::NotFound(name.into()))
        }
        ("POST", None) => match object() {
            Ok(o) => writes::create(&mut lock(store), resource, namespace, o),
            Err(e) => return json_reply(StatusCode::BAD_REQUEST, &store::status(400, "BadRequest", &e)),
        },
        ("PUT", Some(name)) => match object() {
            Ok(o) => writes::update(&mut lock(store), resource, namespace, name, o),
            Err(e) => return json_reply(StatusCode::BAD_REQUEST, &store::status(400, "BadRequest", &e)),
        },
        _ => {
            let status = store::status(405, "MethodNotAllowed", "not served by the fake");
            return json_reply(StatusCode::METHOD_NOT_ALLOWED, &status);
        }
    };
    match result {
        Ok(object) => {
            let code = if method == hyper::Method::POST { StatusCode::CREATED } else { StatusCode::OK };
            json_reply(code, &object)
        }
        Err(e) => {
            let (code, reason) = e.status();
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            json_reply(status, &store::status(code, reason, &e.to_string()))
        }
    }
}

fn url_pairs(query: &str) -> Vec<(String, String)> {
    query.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json_reply(status: StatusCode, value: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())).boxed_unsync())
        .unwrap_or_else(|_| Response::new(empty()))
}

fn empty() -> Body {
    Full::new(Bytes::new()).boxed_unsync()
}
