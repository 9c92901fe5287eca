//! Hostile connections against a real server (`flare::server::run` on a loopback port): headers
//! trickled, bodies promised and never sent, idle connections, and more connections than the
//! limit. Each is cut off within its timeout, and an honest client is still served. The limits
//! are set to fractions of a second here, so the real clock can be used with short bounds; the
//! flood tests keep the default timeouts, since what they show is service *within* a flood that
//! the timeouts alone let last, and they measure an honest client's latency over a few seconds
//! of it.
//!
//! And a hostile payload search against the real binary (`flare serve`, on both stores), whose
//! peak memory is read from `/proc`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use flare::http::connections::Limits;
use flare::store::query::MAX_SEARCH_CHARS;
use flare::store::{NewEvent, Store};
use serde_json::{json, Value};
use support::process::{self, free_port, Proc};
use support::server::{settings, Server};
use support::{Backend, TestDb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

async fn serve(max_connections: usize, header_ms: u64, body_ms: u64) -> Server {
    serve_within(|limits| {
        limits.max_connections = max_connections;
        limits.header_timeout = Duration::from_millis(header_ms);
        limits.body_timeout = Duration::from_millis(body_ms);
    })
    .await
}

async fn serve_within(limits: impl FnOnce(&mut Limits)) -> Server {
    let db = TestDb::new(Backend::Sqlite).await;
    let mut config = settings(&db.url).validate().unwrap();
    limits(&mut config.limits);
    Server::start(config).await.keeping(db)
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

/// A request whose body is promised and not sent: in progress until the body timeout.
async fn body_pending(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /trigger HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .await
    .unwrap();
    s
}

#[tokio::test]
async fn when_every_connection_has_a_request_in_progress_clients_wait_for_a_free_slot() {
    // Two slots, both holding a request whose body is far from its timeout.
    let server = serve_within(|limits| {
        limits.max_connections = 2;
        limits.max_connections_per_ip = Some(2);
        limits.body_timeout = Duration::from_secs(10);
    })
    .await;
    let first = body_pending(server.addr).await;
    let _second = body_pending(server.addr).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
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
async fn at_the_limit_the_connection_idle_longest_is_closed_for_a_new_one() {
    let server = serve_within(|limits| {
        limits.max_connections = 2;
        limits.max_connections_per_ip = Some(2);
    })
    .await;
    let mut oldest = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut newer = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let status = tokio::time::timeout(Duration::from_secs(2), healthz(server.addr))
        .await
        .expect("served at once");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (sent, _) = until_closed(&mut oldest, Duration::from_secs(1)).await;
    assert_eq!(sent, "", "closed without an answer");
    let mut buf = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), newer.read(&mut buf))
            .await
            .is_err(),
        "the newer idle connection is still open"
    );
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_first_byte_timeout() {
    let server = serve_within(|limits| {
        limits.first_byte_timeout = Duration::from_millis(300);
        limits.header_timeout = Duration::from_secs(10);
    })
    .await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let (_, took) = until_closed(&mut silent, Duration::from_secs(3)).await;
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // One that sent a byte has the header timeout.
    let mut started = TcpStream::connect(server.addr).await.unwrap();
    started.write_all(b"G").await.unwrap();
    let mut buf = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(800), started.read(&mut buf))
            .await
            .is_err(),
        "closed before the header timeout"
    );
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

/// The peak resident memory of process `pid` so far (`VmHWM` of `/proc/{pid}/status`), in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc status");
    kb * 1024
}

/// The start of an answer, for failure messages (a found payload is 900 KB).
fn brief(body: &Value) -> String {
    body.to_string().chars().take(300).collect()
}

/// Most memory a search may add to the server's peak.
const SEARCH_MEMORY: u64 = 100 << 20;
/// Most time one search may take (a debug build, on a shared machine).
const SEARCH_TIME: Duration = Duration::from_secs(2);

/// Issue 23: one stored event of 500,000 `a` and `q` = 1,000 `a` took 523 MB and 2.7 s on
/// SQLite (FTS5 copied the event's positions once per token of the phrase), 10,000 characters
/// 21.7 GB. Here: an event of 900,000 `a`, one built so that the re-check of `a…ab` compares the
/// whole term at each position, and the longest allowed terms over them; each search stays under
/// [`SEARCH_TIME`] and all of them add less than [`SEARCH_MEMORY`] to the server's peak. A longer
/// term is refused at once.
async fn a_hostile_search_stays_within_memory_and_time(db: TestDb) {
    let store = Store::open(&db.url).await.expect("open");
    let now = chrono::Utc::now().timestamp_millis();
    let payloads = ["a".repeat(900_000), format!("aab{}", "a".repeat(100_000))];
    let events = payloads
        .iter()
        .enumerate()
        .map(|(i, text)| NewEvent {
            id: format!("evt_hostile_{i}"),
            name: "hostile".into(),
            payload: json!({ "t": text }),
            context: None,
            source: "api".into(),
            parent_run_id: None,
            deliver_at: None,
            now,
        })
        .collect();
    store.event_insert_many(events).await.expect("insert");
    // Searched through the index (SQLite indexes behind a watermark; PostgreSQL on insert).
    while store.search_index(100).await.expect("index") > 0 {}
    drop(store);

    let port = free_port();
    let mut command = process::flare(&[
        "serve",
        "--demo=false",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    command.args(["--database-url", &db.url]);
    let mut server = Proc::spawn("flare serve", command);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    support::wait_for("flare serve to answer", || async {
        let up = http.get(format!("{base}/healthz")).send().await;
        up.is_ok_and(|r| r.status().is_success()).then_some(())
    })
    .await;
    let search = |q: String| {
        let req = http.get(format!("{base}/api/events")).query(&[("q", q)]);
        async move {
            let res = req.send().await.expect("search");
            let status = res.status();
            (status, res.json::<Value>().await.expect("JSON"))
        }
    };
    // The first search opens connections and prepares statements.
    let (status, _) = search("zzz".into()).await;
    assert_eq!(status, 200);
    let before = peak_memory(server.child.id());

    let longest = MAX_SEARCH_CHARS;
    let mut times = Vec::new();
    for (q, found) in [
        ("a".repeat(longest), 2),
        (format!("{}b", "a".repeat(longest - 1)), 0),
        ("ab".repeat(longest / 2), 0),
    ] {
        let started = Instant::now();
        let (status, body) = search(q.clone()).await;
        times.push((format!("{}…", &q[..8]), started.elapsed()));
        assert_eq!(status, 200, "{}", brief(&body));
        let events = body["events"].as_array().expect("events");
        assert_eq!(events.len(), found, "{}…", &q[..8]);
    }
    let grew = peak_memory(server.child.id()).saturating_sub(before);
    assert!(
        grew < SEARCH_MEMORY && times.iter().all(|(_, took)| *took < SEARCH_TIME),
        "the searches raised the server's peak memory by {} MB (at most {} MB) and took {times:?} \
         (each under {SEARCH_TIME:?})",
        grew >> 20,
        SEARCH_MEMORY >> 20,
    );

    let (status, body) = search("a".repeat(10_000)).await;
    assert_eq!(status, 400, "{}", brief(&body));
    let message = body["error"].as_str().expect("error");
    assert!(message.contains(&MAX_SEARCH_CHARS.to_string()), "{message}");
    server.assert_running();
}

backend_tests!(a_hostile_search_stays_within_memory_and_time);

/// What a slow client of a flood does once connected.
#[derive(Debug, Clone, Copy)]
enum Slow {
    /// Sends nothing.
    Idle,
    /// Sends a request line, then one header line every 300 ms, never the end of the headers.
    Trickle,
    /// Sends a whole head promising a body, and one byte of it.
    NoBody,
}

/// A TCP connection to `addr` from the address `from` (any port): on Linux a socket bound to
/// 127.0.0.2 reaches a server listening on 127.0.0.1, so one machine plays two clients.
async fn connect_from(from: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    match tokio::time::timeout(Duration::from_secs(1), socket.connect(addr)).await {
        Ok(connected) => connected,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// One slow client of `kind` from `from` until `until`: connects, misbehaves until the server
/// closes the connection, and connects again.
async fn slow_client(addr: SocketAddr, from: IpAddr, kind: Slow, until: Instant) {
    let until = tokio::time::Instant::from_std(until);
    while tokio::time::Instant::now() < until {
        let Ok(mut s) = connect_from(from, addr).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let head: &[u8] = match kind {
            Slow::Idle => b"",
            Slow::Trickle => b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            Slow::NoBody => b"POST /trigger HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
        };
        if s.write_all(head).await.is_err() {
            continue;
        }
        let mut trickle = tokio::time::interval(Duration::from_millis(300));
        trickle.tick().await;
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                read = s.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                },
                _ = trickle.tick(), if matches!(kind, Slow::Trickle) => {
                    if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                        break;
                    }
                }
                () = tokio::time::sleep_until(until) => return,
            }
        }
        // Reopened at once, as an attacker would; the pause only keeps the test's own loop
        // from spinning on a refused connection.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts `per_kind` slow clients of each kind from `from`, on a thread of their own (one core at
/// most, like a separate machine), until `until`.
fn flood(
    addr: SocketAddr,
    from: IpAddr,
    kinds: &[Slow],
    per_kind: usize,
    until: Instant,
) -> std::thread::JoinHandle<()> {
    let kinds = kinds.to_vec();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut clients = tokio::task::JoinSet::new();
            for kind in kinds {
                for _ in 0..per_kind {
                    clients.spawn(slow_client(addr, from, kind, until));
                }
            }
            while clients.join_next().await.is_some() {}
        });
    })
}

/// How long an honest request may take before it counts as failed.
const HONEST_TIMEOUT: Duration = Duration::from_secs(3);

/// One honest request on a new connection from `from`: `GET /healthz` or `POST /trigger`, read
/// to its end. `Ok` with the time it took, or what went wrong.
async fn honest_request(addr: SocketAddr, from: IpAddr, trigger: bool) -> Result<Duration, String> {
    let start = Instant::now();
    let attempt = async {
        let mut s = connect_from(from, addr).await.map_err(|e| e.to_string())?;
        let request = if trigger {
            let body = r#"{"event":"user.created","payload":{"n":1}}"#;
            format!(
                "POST /trigger HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        } else {
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_string()
        };
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.map_err(|e| e.to_string())?;
        let got = String::from_utf8_lossy(&got);
        if got.starts_with("HTTP/1.1 200") {
            Ok(start.elapsed())
        } else {
            Err(format!(
                "answered {:?}",
                got.lines().next().unwrap_or("nothing")
            ))
        }
    };
    match tokio::time::timeout(HONEST_TIMEOUT, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {HONEST_TIMEOUT:?}")),
    }
}

/// Honest requests from `from` (`clients` at a time, each one after the other) from now until
/// `until`, on a thread of their own (like the flood): the latencies of those answered, and the
/// failures.
fn honest_load(
    addr: SocketAddr,
    from: IpAddr,
    clients: usize,
    until: Instant,
) -> std::thread::JoinHandle<(Vec<Duration>, Vec<String>)> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for c in 0..clients {
                tasks.spawn(async move {
                    let mut latencies = Vec::new();
                    let mut failures = Vec::new();
                    let mut n = c;
                    while Instant::now() < until {
                        n += 1;
                        match honest_request(addr, from, n % 2 == 0).await {
                            Ok(took) => latencies.push(took),
                            Err(why) => failures.push(why),
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    (latencies, failures)
                });
            }
            let mut latencies = Vec::new();
            let mut failures = Vec::new();
            while let Some(done) = tasks.join_next().await {
                let (l, f) = done.unwrap();
                latencies.extend(l);
                failures.extend(f);
            }
            latencies.sort();
            (latencies, failures)
        })
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The bound an honest client's p99 must stay under during a flood. Unloaded it is about a
/// millisecond; the bound leaves room for a loaded 2-core CI machine, and is far below what the
/// flood costs when slots are first come, first served (the slow clients hold them for the 10 s
/// header timeout and the 30 s body timeout).
const HONEST_P99: Duration = Duration::from_secs(1);

/// One flood at a time: two at once on a small machine would measure each other.
static FLOODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Floods a server (64 connections, 16 per address, the default timeouts) from `flood_from` with
/// `per_kind` slow clients of each of `kinds`, for 3.5 s, and measures honest requests from
/// 127.0.0.1 during the last 2.5 s: the p99 of those answered must stay under [`HONEST_P99`],
/// and at most `may_fail` of them (a share) may fail (refused, closed or not answered within
/// [`HONEST_TIMEOUT`]).
async fn honest_service_under_flood(
    flood_from: IpAddr,
    kinds: &[Slow],
    per_kind: usize,
    may_fail: f64,
) {
    let _alone = FLOODS.lock().await;
    let server = serve_within(|limits| limits.max_connections = 64).await;
    let addr = server.addr;
    let honest_from = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let flood_until = Instant::now() + Duration::from_millis(3_500);
    let flooding = flood(addr, flood_from, kinds, per_kind, flood_until);
    // Let the flood take every slot it can before measuring.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (latencies, failures) = honest_load(
        addr,
        honest_from,
        4,
        flood_until - Duration::from_millis(500),
    )
    .join()
    .unwrap();
    flooding.join().unwrap();
    let sent = latencies.len() + failures.len();
    assert!(
        !latencies.is_empty(),
        "no honest request was answered during the flood: {failures:?}"
    );
    assert!(
        failures.len() as f64 <= may_fail * sent as f64,
        "{} of {sent} honest requests failed during the flood (at most {may_fail} may): {failures:?}",
        failures.len()
    );
    let p50 = percentile(&latencies, 0.5);
    let p99 = percentile(&latencies, 0.99);
    let max = latencies.last().copied().unwrap_or_default();
    eprintln!(
        "flood from {flood_from} ({per_kind} each of {kinds:?}): {} honest requests, p50 {p50:?}, p99 {p99:?}, max {max:?}, {} failed {failures:?}",
        latencies.len(),
        failures.len()
    );
    assert!(
        p99 < HONEST_P99,
        "honest p99 {p99:?} during the flood (p50 {p50:?}, max {max:?}), bound {HONEST_P99:?}; failed: {failures:?}"
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_client_is_served_while_another_address_floods() {
    // Slots are first come, first served without the per-address share: the flood holds them
    // for the header and body timeouts, and honest requests time out.
    honest_service_under_flood(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        &[Slow::Idle, Slow::Trickle, Slow::NoBody],
        200,
        0.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_client_is_served_while_its_own_address_floods_with_idle_connections() {
    // The share does not tell the flood from the honest client here; closing the connection
    // idle longest does: an honest one is read (and busy) before a share's worth of newer
    // connections arrives. One that is not (its client stalled between connecting and writing
    // for the time the flood opens 16 connections, a few ms) is closed. So a few may fail: 2 of
    // ~170 did once on a loaded 2-core CI machine, and none in most runs. With the oldest idle
    // connection not closed for the newcomer, nearly all of them fail.
    honest_service_under_flood(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        &[Slow::Idle, Slow::Trickle],
        200,
        0.03,
    )
    .await;
}
