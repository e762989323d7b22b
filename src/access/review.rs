//! The two questions the API server answers for a bearer token, as controller-runtime's metrics filter
//! asks them (`kubernetes-sigs/controller-runtime:pkg/metrics/filters/filters.go`, which the Go EPP's
//! `--metrics-endpoint-auth` uses): who is this (TokenReview), and may they `get` this non-resource URL
//! (SubjectAccessReview with the reviewed user, groups, uid and extra).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::OnceCell;

use super::cache::Decision;
use crate::discovery::{build_client, ClientSource};

/// The API server could not answer (unreachable, timed out, or the client cannot be configured).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("Kubernetes client: {0}")]
    Client(String),
    #[error("{review}: {source}")]
    Api {
        review: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{0}: no answer from the API server within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("{0}: the API server answered without a status")]
    NoStatus(&'static str),
}

/// Asks the API server about tokens. The client is built on first use (and again after a failure), so
/// epp starts while the API server is unreachable and its scrapes get 503 until it answers.
pub struct Reviewer {
    source: ClientSource,
    client: OnceCell<Client>,
    timeout: Duration,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviewer").field("source", &self.source).field("timeout", &self.timeout).finish()
    }
}

impl Reviewer {
    pub fn new(source: ClientSource, timeout: Duration) -> Self {
        Self { source, client: OnceCell::new(), timeout }
    }

    async fn client(&self) -> Result<Client, ReviewError> {
        let client = self
            .client
            .get_or_try_init(|| async {
                build_client(&self.source).await.map_err(|e| ReviewError::Client(e.to_string()))
            })
            .await?;
        Ok(client.clone())
    }

    /// TokenReview then SubjectAccessReview: whether `token` may `verb` `path`.
    pub async fn review(&self, token: &str, verb: &str, path: &str) -> Result<Decision, ReviewError> {
        let client = self.client().await?;
        let Some(user) = self.authenticate(&client, token).await? else {
            return Ok(Decision::Unauthenticated);
        };
        self.authorize(&client, user, verb, path).await
    }

    async fn authenticate(&self, client: &Client, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        const REVIEW: &str = "TokenReview";
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(client.clone());
        let answer = self.bounded(REVIEW, api.create(&PostParams::default(), &review)).await?;
        let status = answer.status.ok_or(ReviewError::NoStatus(REVIEW))?;
        Ok(if status.authenticated == Some(true) { Some(status.user.unwrap_or_default()) } else { None })
    }

    async fn authorize(
        &self,
        client: &Client,
        user: UserInfo,
        verb: &str,
        path: &str,
    ) -> Result<Decision, ReviewError> {
        const REVIEW: &str = "SubjectAccessReview";
        let extra = user.extra.map(|extra| extra.into_iter().collect::<BTreeMap<_, _>>());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(client.clone());
        let answer = self.bounded(REVIEW, api.create(&PostParams::default(), &review)).await?;
        let status = answer.status.ok_or(ReviewError::NoStatus(REVIEW))?;
        Ok(if status.allowed {
            Decision::Allowed
        } else {
            Decision::Forbidden(status.reason.unwrap_or_default())
        })
    }

    async fn bounded<T>(
        &self,
        review: &'static str,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ReviewError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(source)) => Err(ReviewError::Api { review, source }),
            Err(_) => Err(ReviewError::Timeout(review, self.timeout)),
        }
    }
}
