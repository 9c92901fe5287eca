//! Accepting and bounding HTTP connections: [`serve`] runs the router on a listener with
//! [`Limits`], so that idle, slow or half-sent connections cannot hold the process's file
//! descriptors (1,100 such connections once stopped `/healthz` from answering).
//!
//! - **At most `max_connections` at once.** Beyond it Flare stops accepting: new clients wait in
//!   the kernel's backlog until a connection ends, instead of the process running out of file
//!   descriptors. Slow connections end within the timeouts below, so honest clients get in.
//! - **Headers within `header_timeout`**, counted from the moment the connection waits for a
//!   request: the first one, and each one after a response on a kept-alive connection (so it is
//!   also the idle timeout). A client that trickles its headers is disconnected.
//! - **Bodies within `body_timeout`**: a request whose promised body does not arrive in time is
//!   answered 408 and its connection closed.
//! - The peer's address reaches handlers as [`axum::extract::ConnectInfo`].
//! - On shutdown Flare stops accepting, lets requests in progress finish (bounded by the caller's
//!   grace), and closes idle connections.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Default [`Limits::max_connections`]: well under the common 1,024 open-file limit, which the
/// database files, sockets and logs share.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default [`Limits::header_timeout`], seconds.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 10;
/// Default [`Limits::body_timeout`], seconds.
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;

/// How much a client may hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Time to send a request's headers, counted from when the connection waits for one (also
    /// how long a kept-alive connection may stay idle).
    pub header_timeout: Duration,
    /// Time to send a request's body.
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS),
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves; then stops accepting and
/// waits up to `drain` for the requests in progress.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        limits.body_timeout,
    ));
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    // HTTP/1.1 only: guessing the version (HTTP/2 without TLS) would read a connection's first
    // bytes with no timeout, and an idle connection would be held forever.
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut accept_errors = 0u32;
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => {
                    accept_errors = 0;
                    c
                }
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was taken:
                    // say so once in a while, wait a little, and go on serving.
                    accept_errors += 1;
                    if accept_errors == 1 || accept_errors % 100 == 0 {
                        tracing::warn!(error = %e, failures = accept_errors, "accepting a connection failed");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = app
            .clone()
            .map_request(move |req: hyper::Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            });
        let service = TowerToHyperService::new(service);
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "requests still in progress at shutdown were cut off"
        );
    }
    Ok(())
}
