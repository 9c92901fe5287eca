//! Accepting and bounding HTTP connections: [`serve`] runs the router on a listener with
//! [`Limits`], so that idle, slow or half-sent connections can neither hold the process's file
//! descriptors (1,100 such connections once stopped `/healthz` from answering) nor keep honest
//! clients out (1,200 of them, reopened as they were dropped, once held every slot and delayed
//! honest requests by 10-70 s).
//!
//! - **`max_connections` at once**, shared by the rules of [`super::slots`]: each client (IP
//!   address, IPv6 by /64) holds at most `max_connections_per_ip`, its next connection replacing
//!   its own oldest idle one; at the cap a new connection replaces the one that has waited
//!   longest for a request head; a connection with a request in progress is never closed for
//!   another. When every slot holds a request in progress Flare stops accepting, and new clients
//!   wait in the listen queue ([`listen`]: 1,024 deep). After each connection it accepts, the
//!   loop yields, so the new connection reads its request (and others theirs) before the next
//!   newcomer can close it.
//! - **A first byte within `first_byte_timeout`**: a new connection that sends nothing is closed
//!   well before the header timeout.
//! - **Headers within `header_timeout`**, counted from the moment the connection waits for a
//!   request: the first one, and each one after a response on a kept-alive connection (so it is
//!   also the idle timeout). A client that trickles its headers is disconnected.
//! - **Bodies within `body_timeout`**: a request whose promised body does not arrive in time is
//!   answered 408 and its connection closed.
//! - The peer's address reaches handlers as [`axum::extract::ConnectInfo`].
//! - On shutdown Flare stops accepting, lets requests in progress finish (bounded by the caller's
//!   grace), and closes idle connections.
//! - Connections closed to make room or refused are logged through a [`LogThrottle`] (the first,
//!   then one line per 10 s with the count).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::{Frame, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tower::ServiceExt;

use super::slots::{Busy, Reason, Slots};
use crate::log_throttle::LogThrottle;

/// Default [`Limits::max_connections`]: well under the common 1,024 open-file limit, which the
/// database files, sockets and logs share.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default [`Limits::header_timeout`], seconds.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 10;
/// Default [`Limits::body_timeout`], seconds.
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;
/// Default [`Limits::first_byte_timeout`], seconds: a client sends its request right after
/// connecting, one round trip at most.
pub const DEFAULT_FIRST_BYTE_TIMEOUT_SECS: u64 = 3;

/// Connections the kernel completes and queues for [`serve`] to accept (the system caps it at
/// `net.core.somaxconn`, 4,096 on current Linux). The usual 128 overflowed under a flood of
/// connections, and an honest client's connection attempt was dropped and retried a second
/// later.
pub const LISTEN_BACKLOG: u32 = 1_024;

/// A listener on `addr` for [`serve`], with a [`LISTEN_BACKLOG`] queue.
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restarted server binds again at once.
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How much a client may hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections one client (IP address, IPv6 by /64) may hold at once; `None` means a quarter
    /// of `max_connections` (see [`Limits::per_ip`]).
    pub max_connections_per_ip: Option<usize>,
    /// Time a new connection gets to send the first byte of its first request.
    pub first_byte_timeout: Duration,
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
            max_connections_per_ip: None,
            first_byte_timeout: Duration::from_secs(DEFAULT_FIRST_BYTE_TIMEOUT_SECS),
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS),
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
        }
    }
}

impl Limits {
    /// Connections one client may hold: `max_connections_per_ip`, else a quarter of
    /// `max_connections`; at least 1 and at most `max_connections`.
    pub fn per_ip(&self) -> usize {
        self.max_connections_per_ip
            .unwrap_or(self.max_connections / 4)
            .clamp(1, self.max_connections.max(1))
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
    let slots = Slots::new(limits.max_connections, limits.per_ip());
    let log = LogThrottle::default();
    let graceful = GracefulShutdown::new();
    // HTTP/1.1 only: guessing the version (HTTP/2 without TLS) would read a connection's first
    // bytes with no timeout, and an idle connection would be held forever.
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut accept_errors = 0u32;
    tokio::pin!(shutdown);
    'accept: loop {
        tokio::select! {
            () = slots.room() => {}
            () = &mut shutdown => break,
        }
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
        let head_sent = head_sent(&stream);
        let admitted = loop {
            match slots.admit(peer.ip(), head_sent) {
                Ok(a) => break a,
                // Every slot holds a request in progress: this connection waits for one to end.
                Err(Reason::Full) => tokio::select! {
                    () = slots.room() => {}
                    () = &mut shutdown => break 'accept,
                },
                Err(Reason::ClientShare) => {
                    log_refused(&log, peer);
                    continue 'accept;
                }
            }
        };
        if let Some(reason) = admitted.made_room {
            log_made_room(&log, reason, peer);
        }
        let service = TowerToHyperService::new(tower::service_fn({
            let app = app.clone();
            let slot = admitted.slot;
            move |req: hyper::Request<hyper::body::Incoming>| {
                let busy = slot.busy();
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(ConnectInfo(peer));
                let answer = app.clone().oneshot(req);
                async move {
                    let res = answer.await?;
                    Ok::<_, Infallible>(res.map(|body| Body::new(Answer { body, _busy: busy })))
                }
            }
        }));
        let io = TokioIo::new(Watched::new(stream, limits.first_byte_timeout));
        let conn = graceful.watch(builder.serve_connection(io, service));
        let closed = admitted.closed;
        tokio::spawn(async move {
            tokio::select! {
                ended = conn => if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                },
                Ok(()) = closed => tracing::debug!(%peer, "idle connection closed to make room"),
            }
        });
        // Let the new connection read what it was sent, and the runtime look for other
        // connections' bytes, before accepting the next: a flood from the client's own address
        // must not close it for newcomers before its head is read.
        tokio::task::yield_now().await;
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

/// Whether a new connection's whole request head is waiting in its socket already (read without
/// taking it): a client that sends its request at once is then admitted with a request in
/// progress.
#[cfg(unix)]
fn head_sent(stream: &TcpStream) -> bool {
    use std::os::fd::AsFd;
    // A second descriptor of the same socket, as a std stream that can peek; non-blocking like
    // the first (the flag belongs to the socket).
    let Ok(fd) = stream.as_fd().try_clone_to_owned() else {
        return false;
    };
    let mut buf = [0u8; 1024];
    match std::net::TcpStream::from(fd).peek(&mut buf) {
        Ok(n) => buf[..n].windows(4).any(|w| w == b"\r\n\r\n"),
        Err(_) => false,
    }
}

#[cfg(not(unix))]
fn head_sent(_: &TcpStream) -> bool {
    false
}

/// A connection refused: its client holds its share, each connection with a request in progress.
fn log_refused(log: &LogThrottle, peer: SocketAddr) {
    let now = chrono::Utc::now().timestamp_millis();
    if let Some(suppressed) = log.admit("connections:refused", now) {
        tracing::warn!(client = %peer.ip(), suppressed, "connection refused: this client holds its share of connections, each with a request in progress (--max-connections-per-ip)");
    }
}

fn log_made_room(log: &LogThrottle, reason: Reason, peer: SocketAddr) {
    let now = chrono::Utc::now().timestamp_millis();
    let kind = match reason {
        Reason::ClientShare => "connections:room:client",
        Reason::Full => "connections:room:full",
    };
    if let Some(suppressed) = log.admit(kind, now) {
        match reason {
            Reason::ClientShare => tracing::info!(client = %peer.ip(), suppressed, "a client at its share of connections opened another: its oldest idle one was closed (--max-connections-per-ip)"),
            Reason::Full => tracing::info!(suppressed, "connections at the limit: the one idle longest was closed for a new one (--max-connections)"),
        }
    }
}

/// An answer's body, holding its connection [`Busy`] until it has been written.
struct Answer {
    body: Body,
    _busy: Busy,
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket as the HTTP layer reads it: a read fails when a new connection sent
/// nothing within the first-byte timeout.
struct Watched {
    stream: TcpStream,
    /// Until the first byte: when the connection is given up.
    first_byte: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Watched {
    fn new(stream: TcpStream, first_byte_timeout: Duration) -> Self {
        Self {
            stream,
            first_byte: Some(Box::pin(tokio::time::sleep(first_byte_timeout))),
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.first_byte = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match self.first_byte.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "nothing sent within the first-byte timeout",
                ))),
                _ => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
