//! Hostile connections against a real server (`flare::server::run` on a loopback port): headers
//! trickled, bodies promised and never sent, idle connections, and more connections than the
//! limit. Each is cut off within its timeout, and an honest client is still served. The limits
//! are set to fractions of a second here, so the real clock can be used with short bounds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use flare::config::RawServe;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

struct Server {
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
    _stop: oneshot::Sender<()>,
}

async fn serve(max_connections: usize, header_ms: u64, body_ms: u64) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut config = RawServe {
        listen: "127.0.0.1:0".into(),
        database_url: format!("sqlite://{}/flare.db", dir.path().display()),
        concurrency: 4,
        lease_secs: 30,
        shutdown_grace_secs: 5,
        ..RawServe::default()
    }
    .validate()
    .unwrap();
    config.limits.max_connections = max_connections;
    config.limits.header_timeout = Duration::from_millis(header_ms);
    config.limits.body_timeout = Duration::from_millis(body_ms);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        flare::server::run(config, listener, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Server {
        addr,
        _dir: dir,
        _stop: stop,
    }
}

/// Reads until the server closes the connection (or `limit` passes: a failure); returns what
/// it sent and how long that took.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(start.elapsed()), stream.read(&mut buf))
            .await
        {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the connection was still open after {limit:?}; it sent {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), start.elapsed())
}

/// An honest request on a new connection: the status line.
async fn healthz(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = until_closed(&mut s, Duration::from_secs(5)).await;
    answer.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_disconnected() {
    let server = serve(16, 300, 5_000).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // One more header byte now and then, never the end of the headers.
    let writer = async {
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if s.write_all(b"X").await.is_err() {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), writer).await;
    let (sent, _) = until_closed(&mut s, Duration::from_secs(3)).await;
    assert!(!sent.contains("200 OK"), "{sent}");
    assert_eq!(healthz(server.addr).await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_header_timeout() {
    let server = serve(16, 300, 5_000).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    let (_, took) = until_closed(&mut idle, Duration::from_secs(3)).await;
    assert!(
        took >= Duration::from_millis(250),
        "closed too early: {took:?}"
    );
    // Kept alive after a response, then idle: closed too.
    let mut kept = TcpStream::connect(server.addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let (sent, _) = until_closed(&mut kept, Duration::from_secs(3)).await;
    assert!(sent.starts_with("HTTP/1.1 200 OK"), "{sent}");
}

#[tokio::test]
async fn a_body_that_never_arrives_gets_408() {
    let server = serve(16, 5_000, 300).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(
        b"POST /trigger HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"event\": ",
    )
    .await
    .unwrap();
    let (sent, took) = until_closed(&mut s, Duration::from_secs(3)).await;
    assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
    assert!(sent.contains("did not arrive in time"), "{sent}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn beyond_the_connection_limit_clients_wait_for_a_free_slot() {
    // Two slots, both held by connections that send nothing (header timeout far away).
    let server = serve(2, 10_000, 10_000).await;
    let first = TcpStream::connect(server.addr).await.unwrap();
    let _second = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting = tokio::spawn(healthz(server.addr));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "served beyond the limit");
    drop(first);
    let status = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("served once a slot is free")
        .unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn honest_clients_are_served_while_slow_ones_take_every_slot() {
    let server = serve(8, 300, 300).await;
    let addr = server.addr;
    // Twice as many slow connections as slots, renewed as they are cut off.
    let attack = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut held = Vec::new();
        while Instant::now() < deadline {
            held.retain(|s: &TcpStream| s.peer_addr().is_ok());
            while held.len() < 16 {
                match tokio::time::timeout(Duration::from_millis(50), TcpStream::connect(addr))
                    .await
                {
                    Ok(Ok(mut s)) => {
                        let _ = s.write_all(b"GET / HTTP/1.1\r\n").await;
                        held.push(s);
                    }
                    _ => break,
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..3 {
        let status = tokio::time::timeout(Duration::from_secs(3), healthz(addr))
            .await
            .expect("an honest request is answered under attack");
        assert_eq!(status, "HTTP/1.1 200 OK");
    }
    let _server = attack.await.unwrap();
}
