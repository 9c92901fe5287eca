//! The server's connection slots: who holds them, and who gives one up when they run out.
//!
//! First come, first served let a flood of slow clients (idle, trickling headers, never sending
//! a body) hold every slot for the length of its timeouts, and honest requests waited 10-70 s.
//! [`Slots`] admits by two rules instead:
//!
//! - **A share per client.** One client (an IP address; IPv6 by its /64, as [`ClientId`] counts
//!   sign-ins) holds at most `per_client` connections. Its next one takes the place of its own
//!   oldest idle connection, or is refused when every one of its connections has a request in
//!   progress; a flood from one address never reaches the others' slots.
//! - **At the cap, the oldest idle connection makes room.** A new connection from a client within
//!   its share closes the connection that has waited longest for a request head.
//!
//! *Idle* means waiting for a request head: a new connection, one part-way through its head (a
//! trickling client), or one kept alive after an answer. A connection with a request in progress
//! (from its complete head until its answer is written) is never closed for another; when every
//! slot holds one there is no room ([`Reason::Full`]): the accept loop waits for
//! [`Slots::room`], and new clients wait in the kernel's backlog.
//!
//! Oldest first, whatever an idle connection has sent: a client sending its request at once is
//! the newest, and its head is read long before a flood from its own address has opened a share's
//! worth of connections after it. (Closing those that sent nothing first did the opposite: once
//! trickling connections filled a share, each new connection was the first to go.) A connection
//! whose whole head is already waiting in its socket is admitted busy.
//!
//! Plain data and a lock; no IO and no clock (the order of waiting is a counter), so tests call
//! it directly. A connection reports its requests with [`Slot::busy`] (the [`Busy`] guard lives
//! until the answer is written) and frees its slot by dropping the [`Slot`]; its task learns it
//! was closed for another through [`Admitted::closed`].

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, Notify};

use super::login_attempts::ClientId;

/// An idle connection's place in the order of closing: since when it has waited for a head (a
/// counter value), then its id.
type Waiting = (u64, u64);

#[derive(Debug)]
struct Conn {
    client: ClientId,
    /// `None` while a request is in progress, else since when it has waited for a head.
    idle_since: Option<u64>,
    /// Tells the connection's task to close it.
    close: Option<oneshot::Sender<()>>,
}

#[derive(Debug, Default)]
struct Client {
    open: usize,
    idle: BTreeSet<Waiting>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Ids and waiting order, one counter.
    next: u64,
    conns: HashMap<u64, Conn>,
    idle: BTreeSet<Waiting>,
    clients: HashMap<ClientId, Client>,
}

impl Inner {
    fn tick(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Marks `id` busy (a request in progress) or idle from now on.
    fn set_idle(&mut self, id: u64, idle: bool) {
        let now = self.tick();
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let client = self.clients.entry(conn.client).or_default();
        if let Some(since) = conn.idle_since.take() {
            self.idle.remove(&(since, id));
            client.idle.remove(&(since, id));
        }
        if idle {
            conn.idle_since = Some(now);
            self.idle.insert((now, id));
            client.idle.insert((now, id));
        }
    }

    /// Forgets `id`; returns its connection.
    fn remove(&mut self, id: u64) -> Option<Conn> {
        self.set_idle(id, false);
        let conn = self.conns.remove(&id)?;
        if let Some(c) = self.clients.get_mut(&conn.client) {
            c.open -= 1;
            if c.open == 0 {
                self.clients.remove(&conn.client);
            }
        }
        Some(conn)
    }

    /// Closes the idle connection `w` names to make room.
    fn close(&mut self, w: Waiting) {
        if let Some(mut conn) = self.remove(w.1) {
            if let Some(tx) = conn.close.take() {
                let _ = tx.send(());
            }
        }
    }
}

/// Why a connection was refused, or why another was closed to admit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Its client holds its share of connections.
    ClientShare,
    /// Every slot is taken.
    Full,
}

/// A connection let in.
#[derive(Debug)]
pub struct Admitted {
    /// Its slot, freed when the last clone is dropped.
    pub slot: Arc<Slot>,
    /// Resolves with `Ok` when the connection was closed to make room for another.
    pub closed: oneshot::Receiver<()>,
    /// Set when another connection was closed to make room for this one.
    pub made_room: Option<Reason>,
}

/// The connection slots of one listener.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    per_client: usize,
    inner: Mutex<Inner>,
    room: Notify,
}

impl Slots {
    /// `max` connections at once (at least 1), at most `per_client` (at least 1) per client.
    pub fn new(max: usize, per_client: usize) -> Arc<Self> {
        let max = max.max(1);
        Arc::new(Self {
            max,
            per_client: per_client.clamp(1, max),
            inner: Mutex::new(Inner::default()),
            room: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each step under the lock leaves the data whole, so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections open.
    pub fn open(&self) -> usize {
        self.lock().conns.len()
    }

    /// Whether a connection could be admitted now: a slot is free, or one is idle.
    pub fn has_room(&self) -> bool {
        let inner = self.lock();
        inner.conns.len() < self.max || !inner.idle.is_empty()
    }

    /// Resolves once [`Self::has_room`].
    pub async fn room(&self) {
        while !self.has_room() {
            self.room.notified().await;
        }
    }

    /// Admits a connection from `peer`, closing an idle one to make room if needed, or says why
    /// it is refused: [`Reason::Full`] when every slot holds a request in progress (wait for
    /// [`Self::room`] and try again), [`Reason::ClientShare`] when every connection of its
    /// client does. `head_sent`: its whole first request head is waiting in its socket already,
    /// so it is admitted busy.
    pub fn admit(self: &Arc<Self>, peer: IpAddr, head_sent: bool) -> Result<Admitted, Reason> {
        let client = ClientId::of(Some(peer));
        let mut inner = self.lock();
        if inner.conns.len() >= self.max && inner.idle.is_empty() {
            return Err(Reason::Full);
        }
        let mut made_room = None;
        let held = inner.clients.get(&client).map_or(0, |c| c.open);
        if held >= self.per_client {
            let oldest = inner
                .clients
                .get(&client)
                .and_then(|c| c.idle.first().copied());
            inner.close(oldest.ok_or(Reason::ClientShare)?);
            made_room = Some(Reason::ClientShare);
        } else if inner.conns.len() >= self.max {
            let oldest = inner.idle.first().copied();
            inner.close(oldest.ok_or(Reason::Full)?);
            made_room = Some(Reason::Full);
        }
        let id = inner.tick();
        let (tx, closed) = oneshot::channel();
        inner.conns.insert(
            id,
            Conn {
                client,
                idle_since: None,
                close: Some(tx),
            },
        );
        inner.clients.entry(client).or_default().open += 1;
        inner.set_idle(id, !head_sent);
        drop(inner);
        Ok(Admitted {
            slot: Arc::new(Slot {
                slots: Arc::clone(self),
                id,
            }),
            closed,
            made_room,
        })
    }

    fn set_idle(&self, id: u64, idle: bool) {
        self.lock().set_idle(id, idle);
        if idle {
            // An idle connection is room for the next one.
            self.room.notify_one();
        }
    }
}

/// One admitted connection's hold on a slot.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

impl Slot {
    /// A request head is complete: the connection is not closed for another until the returned
    /// guard is dropped (when its answer has been written).
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.slots.set_idle(self.id, false);
        Busy(Arc::clone(self))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(self.id);
        self.slots.room.notify_one();
    }
}

/// A request in progress on a connection; dropping it makes the connection wait for its next
/// head, idle.
#[derive(Debug)]
pub struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.slots.set_idle(self.0.id, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn admit(slots: &Arc<Slots>, peer: &str) -> Admitted {
        slots.admit(ip(peer), false).expect("room")
    }

    fn closed(a: &mut Admitted) -> bool {
        a.closed.try_recv().is_ok()
    }

    #[test]
    fn a_client_beyond_its_share_replaces_its_own_oldest_idle_connection() {
        let slots = Slots::new(10, 2);
        let mut first = admit(&slots, "10.0.0.1");
        let mut second = admit(&slots, "10.0.0.1");
        let mut other = admit(&slots, "10.0.0.2");
        let third = admit(&slots, "10.0.0.1");
        assert_eq!(third.made_room, Some(Reason::ClientShare));
        assert!(closed(&mut first), "the oldest is closed");
        assert!(!closed(&mut second));
        assert!(
            !closed(&mut other),
            "another client's, though older, is not"
        );
        assert_eq!(slots.open(), 3);
        drop(other);
        assert_eq!(slots.open(), 2);
    }

    #[test]
    fn a_client_whose_connections_all_have_a_request_in_progress_is_refused() {
        let slots = Slots::new(10, 2);
        let a = admit(&slots, "10.0.0.1");
        let b = admit(&slots, "10.0.0.1");
        let _busy = (a.slot.busy(), b.slot.busy());
        assert_eq!(
            slots.admit(ip("10.0.0.1"), false).map(|_| ()),
            Err(Reason::ClientShare)
        );
        // Another client is let in.
        assert!(slots.admit(ip("10.0.0.2"), false).is_ok());
    }

    #[test]
    fn ipv6_clients_share_by_their_64() {
        let slots = Slots::new(10, 1);
        let a = admit(&slots, "2001:db8::1");
        let _busy = a.slot.busy();
        assert!(slots.admit(ip("2001:db8::2"), false).is_err(), "same /64");
        assert!(
            slots.admit(ip("2001:db8:0:1::1"), false).is_ok(),
            "another /64"
        );
    }

    #[test]
    fn at_the_cap_the_connection_idle_longest_is_closed_never_a_busy_one() {
        let slots = Slots::new(3, 3);
        let mut busy = admit(&slots, "10.0.0.1");
        let mut older = admit(&slots, "10.0.0.2");
        let mut newer = admit(&slots, "10.0.0.3");
        let guard = busy.slot.busy();
        let mut fourth = admit(&slots, "10.0.0.4");
        assert_eq!(fourth.made_room, Some(Reason::Full));
        assert!(closed(&mut older));
        assert!(!closed(&mut newer));
        let _fifth = admit(&slots, "10.0.0.5");
        assert!(closed(&mut newer));
        assert!(!closed(&mut fourth));
        assert!(!closed(&mut busy), "a request in progress is never closed");
        drop(guard);
    }

    #[test]
    fn a_connection_whose_head_was_sent_at_once_is_admitted_busy() {
        let slots = Slots::new(2, 2);
        let mut head = slots.admit(ip("10.0.0.1"), true).expect("room");
        let mut idle = admit(&slots, "10.0.0.1");
        let _third = admit(&slots, "10.0.0.1");
        assert!(closed(&mut idle), "though newer");
        assert!(!closed(&mut head));
    }

    #[test]
    fn a_full_house_of_requests_in_progress_has_no_room_until_one_ends() {
        let slots = Slots::new(2, 2);
        let mut a = admit(&slots, "10.0.0.1");
        let b = admit(&slots, "10.0.0.2");
        let busy_a = a.slot.busy();
        let busy_b = b.slot.busy();
        assert!(!slots.has_room());
        assert_eq!(
            slots.admit(ip("10.0.0.3"), false).map(|_| ()),
            Err(Reason::Full)
        );
        // An answer written: that connection waits for its next head, and is room.
        drop(busy_a);
        assert!(slots.has_room());
        let c = admit(&slots, "10.0.0.3");
        assert_eq!(c.made_room, Some(Reason::Full));
        assert!(closed(&mut a));
        drop(busy_b);
        drop(b);
        assert_eq!(slots.open(), 1);
    }

    #[test]
    fn full_wins_over_a_client_share_when_every_slot_is_busy() {
        // A client allowed every slot (behind a proxy) waits for one rather than being refused.
        let slots = Slots::new(1, 1);
        let a = admit(&slots, "10.0.0.1");
        let _busy = a.slot.busy();
        assert_eq!(
            slots.admit(ip("10.0.0.1"), false).map(|_| ()),
            Err(Reason::Full)
        );
    }

    #[test]
    fn a_kept_alive_connection_waits_at_the_back_after_each_answer() {
        let slots = Slots::new(2, 2);
        let mut kept = admit(&slots, "10.0.0.1");
        let mut newer = admit(&slots, "10.0.0.2");
        drop(kept.slot.busy());
        let _third = admit(&slots, "10.0.0.3");
        assert!(
            closed(&mut newer),
            "it waited longer than the one just answered"
        );
        assert!(!closed(&mut kept));
    }

    #[tokio::test]
    async fn room_resolves_when_a_slot_frees() {
        let slots = Slots::new(1, 1);
        let a = admit(&slots, "10.0.0.1");
        let busy = a.slot.busy();
        let waiting = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(busy);
        drop(a);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("room")
            .expect("task");
        assert_eq!(slots.open(), 0);
    }
}
