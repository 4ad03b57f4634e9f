//! The HTTP API (version 1, JSON), `/metrics` and the status page.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /v1/links` | every link with its state, latest estimate and its age |
//! | `GET /v1/links/{name}` | one link |
//! | `GET /v1/links/{name}/history?limit=N` | its last N runs (default 100), oldest first |
//! | `POST /v1/links/{name}/measure` | measure it now: 202, or 409 while it runs |
//! | `GET /v1/stream[?link=NAME]` | server-sent events: an `estimate` event per run as it ends, a `btc` event when a neighbour's transfer-rate prediction changes, a `passive` event at each poll of a neighbour (its passive-tcp reading and packet timing), a `route` event when route control switches a destination |
//! | `GET /v1/routes` | route control: members, destinations, candidate paths with their hops and scores, the chosen one, recent switches |
//! | `POST /v1/routes/choose?prefix=P&path=X` | X = `via NAME`, `direct` or `normal` sets destination P's path by hand; `auto` gives it back to the rule: 202 |
//! | `GET /v1/matrix` | a node with `[matrix]`: the whole mesh's matrix as last collected from every member (schema 1: each pair measured or inferred, its basis and age; loss where measured) |
//! | `GET /matrix` | that matrix as a page |
//! | `GET /metrics` | Prometheus text format, or OpenMetrics when the scraper asks for it |
//! | `GET /` | the status page |
//!
//! Errors are JSON `{"error": "..."}` with a 4xx status. With a token configured,
//! every request needs `Authorization: Bearer TOKEN` (or `?token=TOKEN`).
//!
//! What a web page the operator opens cannot do: a `POST` needs the header
//! `X-MGRP-Request` (any value; a page on another site cannot send it without the
//! API's consent, which it never gives), and one that carries an `Origin` other than
//! the API's own is refused. Without a token every request must name the API by an
//! address or `localhost` in its `Host` (a page's domain rebound to this host names
//! itself there).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use mgrp_views::link::Links;
use serde_json::json;
use tokio::sync::{broadcast, watch};

use super::{metrics, page};
use crate::state::shared::{NowError, Shared};

/// Runs a history request returns unless `limit` says otherwise.
const DEFAULT_HISTORY: usize = 100;

#[derive(Clone)]
struct App {
    node: Arc<Shared>,
    /// Flips to true when the server shuts down, ending open event streams.
    shutdown: watch::Receiver<bool>,
    /// Event streams open now.
    streams: Arc<AtomicUsize>,
    /// Other requests being answered now.
    busy: Arc<AtomicUsize>,
}

/// Event streams open at once; one more is answered 503.
pub const MAX_STREAMS: usize = 64;

/// Other requests answered at once; one more is answered 503.
pub const MAX_REQUESTS: usize = 64;

/// Gives a slot back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// Takes one of `max` slots of `count`, if one is free.
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        if count.fetch_add(1, Ordering::SeqCst) >= max {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Self(count.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// The router for `node`; event streams end when `shutdown` turns true.
pub fn router(node: Arc<Shared>, shutdown: watch::Receiver<bool>) -> Router {
    let app = App {
        node,
        shutdown,
        streams: Arc::new(AtomicUsize::new(0)),
        busy: Arc::new(AtomicUsize::new(0)),
    };
    Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics_text))
        .route("/matrix", get(matrix_page))
        .route("/v1/matrix", get(matrix))
        .route("/v1/links", get(links))
        .route("/v1/links/{name}", get(link))
        .route("/v1/links/{name}/history", get(history))
        .route("/v1/links/{name}/measure", post(measure_now))
        .route("/v1/stream", get(stream))
        .route("/v1/routes", get(routes))
        .route("/v1/routes/choose", post(choose))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such resource; see /v1/links") })
        .method_not_allowed_fallback(|req: Request| async move {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                format!(
                    "{} is not allowed on {}: links are read with GET, and measured with POST /v1/links/NAME/measure",
                    req.method(),
                    req.uri().path()
                ),
            )
        })
        .layer(middleware::from_fn_with_state(app.clone(), authorize))
        .layer(middleware::from_fn_with_state(app.clone(), same_origin))
        .with_state(app)
}

/// The header a `POST` must carry.
pub const REQUEST_HEADER: &str = "x-mgrp-request";

/// Whether `host` (a `Host` header) names this API by an address or `localhost`,
/// with or without a port.
fn host_is_literal(host: &str) -> bool {
    // `[v6]` or `[v6]:port`
    if let Some(rest) = host.strip_prefix('[') {
        return rest
            .split_once(']')
            .is_some_and(|(a, _)| a.parse::<std::net::Ipv6Addr>().is_ok());
    }
    let name = host
        .rsplit_once(':')
        .filter(|(_, port)| port.parse::<u16>().is_ok())
        .map_or(host, |(name, _)| name);
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// Refuses what a web page on another site could make the operator's browser send:
/// a `POST` without [`REQUEST_HEADER`], a request whose `Origin` is another site, and
/// without a token one that names the API by a domain in its `Host`.
async fn same_origin(
    State(app): State<App>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if app.node.config().token.is_none() && !host_is_literal(host) {
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "refused: without a token this API answers only requests that name it by its address or localhost, not {host:?}"
            ),
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let own = origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest.trim_end_matches('/').eq_ignore_ascii_case(host));
        if !own {
            return error(
                StatusCode::FORBIDDEN,
                format!("refused: a request from a page of {origin}, not of this API"),
            );
        }
    }
    let Some(_slot) = Slot::take(&app.busy, MAX_REQUESTS) else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_REQUESTS} requests are being answered; try again shortly"),
        );
    };
    if req.method() == axum::http::Method::POST && !headers.contains_key(REQUEST_HEADER) {
        return error(
            StatusCode::FORBIDDEN,
            "refused: a POST needs the header `X-MGRP-Request: 1` (so that no web page can send it), e.g. curl -X POST -H 'X-MGRP-Request: 1' ...",
        );
    }
    next.run(req).await
}

async fn authorize(
    State(app): State<App>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let Some(token) = &app.node.config().token else {
        return next.run(req).await;
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let given = bearer.or(q.get("token").map(String::as_str));
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "this overlay needs its token: send `Authorization: Bearer TOKEN`",
        )
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

async fn status_page(State(app): State<App>) -> Html<String> {
    Html(page::render(&app.node.config()))
}

async fn matrix_page(State(app): State<App>) -> Response {
    let config = app.node.config();
    if config.matrix.is_none() {
        return no_matrix();
    }
    Html(page::render_matrix(&config)).into_response()
}

fn no_matrix() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "this node collects no matrix ([matrix] in its configuration)",
    )
}

async fn matrix(State(app): State<App>) -> Response {
    if app.node.config().matrix.is_none() {
        return no_matrix();
    }
    match app.node.matrix() {
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the matrix has not been collected yet; ask again in a few seconds",
        ),
        Some(Err(e)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the matrix cannot be collected: {e}"),
        ),
        Some(Ok(m)) => axum::Json(m).into_response(),
    }
}

async fn metrics_text(State(app): State<App>, headers: HeaderMap) -> Response {
    let format =
        mgrp_core::exposition::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    (
        [(header::CONTENT_TYPE, format.content_type())],
        metrics::render(&app.node, format),
    )
        .into_response()
}

async fn links(State(app): State<App>) -> Response {
    let links = Links {
        node: app.node.config().name.clone(),
        links: app.node.links(),
    };
    // Through a JSON value, as it always went: its keys sorted.
    match serde_json::to_value(links) {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn routes(State(app): State<App>) -> Response {
    match app.node.routes() {
        None => error(
            StatusCode::NOT_FOUND,
            "route control is off on this node ([routing] in its configuration)",
        ),
        Some(r) => match r.view() {
            Some(v) => axum::Json(v).into_response(),
            None => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "route control has not polled its members yet; ask again in a second",
            ),
        },
    }
}

async fn choose(State(app): State<App>, Query(q): Query<HashMap<String, String>>) -> Response {
    let Some(r) = app.node.routes() else {
        return error(
            StatusCode::NOT_FOUND,
            "route control is off on this node ([routing] in its configuration)",
        );
    };
    let (Some(prefix), Some(path)) = (q.get("prefix"), q.get("path")) else {
        return error(
            StatusCode::BAD_REQUEST,
            "say which destination and path: ?prefix=10.9.0.0/24&path=via+NAME (or direct, normal, auto)",
        );
    };
    match r.choose(prefix, path) {
        Ok(()) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"prefix": prefix, "path": path, "applied": "now"})),
        )
            .into_response(),
        Err(e) => error(StatusCode::NOT_FOUND, e.to_string()),
    }
}

async fn link(State(app): State<App>, Path(name): Path<String>) -> Response {
    match app.node.link(&name) {
        Some(v) => axum::Json(v).into_response(),
        None => no_link(&name),
    }
}

fn no_link(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no link named {name:?}; GET /v1/links lists them"),
    )
}

async fn history(
    State(app): State<App>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => DEFAULT_HISTORY,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "limit must be a positive whole number of runs",
            );
        }
    };
    match app.node.history(&name, limit) {
        Some(h) => axum::Json(json!({ "link": name, "estimates": h })).into_response(),
        None => no_link(&name),
    }
}

async fn measure_now(State(app): State<App>, Path(name): Path<String>) -> Response {
    match app.node.measure_now(&name) {
        Ok(()) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({ "link": name, "queued": true })),
        )
            .into_response(),
        Err(NowError::NoSuchLink) => no_link(&name),
        Err(e @ NowError::Running) => error(StatusCode::CONFLICT, e.to_string()),
    }
}

async fn stream(State(app): State<App>, Query(q): Query<HashMap<String, String>>) -> Response {
    let only = q.get("link").cloned();
    if let Some(name) = &only
        && app.node.config().link(name).is_none()
    {
        return no_link(name);
    }
    let Some(slot) = Slot::take(&app.streams, MAX_STREAMS) else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_STREAMS} event streams are open on this node; close one first"),
        );
    };
    let rx = app.node.subscribe();
    Sse::new(events(rx, only, app.shutdown.clone(), slot))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Each new run as an `estimate` event, each changed prediction as a `btc` event,
/// each poll of a neighbour's passive sources as a `passive` event, each switch of a
/// route-controlled destination as a `route` event (not with `?link=`) (or
/// a `lagged` event saying how many a slow subscriber missed), until the server shuts
/// down.
fn events(
    rx: broadcast::Receiver<crate::state::shared::Event>,
    only: Option<String>,
    shutdown: watch::Receiver<bool>,
    slot: Slot,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(
        (rx, only, shutdown, slot),
        |(mut rx, only, mut shutdown, slot)| async move {
            loop {
                if *shutdown.borrow() {
                    return None;
                }
                let got = tokio::select! {
                    r = rx.recv() => r,
                    _ = shutdown.changed() => return None,
                };
                let event = match got {
                    Ok(ev) if only.as_ref().is_none_or(|n| ev.about(n)) => match ev {
                        crate::state::shared::Event::Estimate(e) => Event::default()
                            .event("estimate")
                            .id(e.seq.to_string())
                            .json_data(&e)
                            .ok()?,
                        crate::state::shared::Event::Passive(p) => {
                            Event::default().event("passive").json_data(&p).ok()?
                        }
                        crate::state::shared::Event::Prediction(b) => {
                            Event::default().event("prediction").json_data(&b).ok()?
                        }
                        crate::state::shared::Event::Route(r) => {
                            Event::default().event("route").json_data(&r).ok()?
                        }
                    },
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        Event::default().event("lagged").data(n.to_string())
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                return Some((Ok(event), (rx, only, shutdown, slot)));
            }
        },
    )
}
