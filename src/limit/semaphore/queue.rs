//! The FIFO of waiters: nodes in a chunked slab, linked by index.
//!
//! A future remembers only its node's index (no pointer is shared with it), so a node can
//! never move while its owner lives. To give memory back after a burst anyway, the slab is
//! cut into chunks of [`CHUNK`] nodes: a chunk whose nodes are all vacant is freed on its
//! own, whatever the indices of the nodes still in use elsewhere. What stays after a burst
//! of `n` waiters down to one is that waiter's chunk plus a directory of `n / CHUNK`
//! pointers (and a list of its holes): about 16 bytes per 256 waiters of the peak, instead
//! of the 40 bytes per waiter of one flat `Vec`.
//!
//! Vacant nodes of live chunks form a doubly linked free list, so freeing a chunk can take
//! its nodes off that list (each unlink is O(1); a chunk is freed at most once per
//! [`CHUNK`] frees of its nodes, so this is amortised O(1) per waiter).

use std::mem;
use std::task::Waker;

/// Index meaning "no node" in the links.
pub(super) const NIL: usize = usize::MAX;

/// Nodes per chunk (a power of two). Small under loom, so that the models cross chunk
/// boundaries and free chunks.
#[cfg(not(tollgate_loom))]
const CHUNK_BITS: u32 = 8;
#[cfg(tollgate_loom)]
const CHUNK_BITS: u32 = 1;
const CHUNK: usize = 1 << CHUNK_BITS;

/// A queue whose nodes fit in this many slots keeps them when it empties (no allocation
/// churn for a semaphore that sees a few waiters at a time); a larger one frees them all.
const KEEP_WHEN_EMPTY: usize = 64;

struct Node {
    /// Queue links while queued, free-list links while vacant (the free list's first
    /// node has a stale `prev`: it is known as `Queue::free`).
    prev: usize,
    next: usize,
    /// The waker of the future that owns the node while it is queued; `None`: vacant.
    waker: Option<Waker>,
    /// The waiter's place in line while it is queued (or refused, until its owner
    /// collects the refusal).
    ticket: u64,
    /// How many permits the waiter asks for.
    want: u32,
    /// Set when the waiter was taken out of the queue without a grant: the node stays
    /// its owner's until the owner collects the refusal (see [`Queue::collect`]).
    refused: Option<Refused>,
}

/// Why a queued waiter was taken out of the queue without a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The semaphore was closed.
    Closed,
    /// The limit fell below what the waiter asks for.
    OverLimit,
}

struct Chunk {
    /// Grows by `push` up to `CHUNK` nodes, so a queue that never holds more than a few
    /// waiters allocates only a few nodes.
    nodes: Vec<Node>,
    /// Nodes not vacant.
    used: usize,
}

pub(super) struct Queue {
    /// The directory: `None` for a freed chunk.
    chunks: Vec<Option<Box<Chunk>>>,
    /// Indices of `None` entries of `chunks`, for reuse; may hold stale entries (past the
    /// end, or reused since), which are skipped.
    holes: Vec<usize>,
    /// Chunks that are `Some`.
    live_chunks: usize,
    /// The chunk new nodes are pushed into when the free list is empty (`NIL`: none yet,
    /// or it is full).
    growing: usize,
    /// First vacant node of the doubly linked free list.
    free: usize,
    head: usize,
    tail: usize,
    /// What the head node wants (valid while `head != NIL`): kept here because every
    /// release with waiters asks, and the node itself is two indirections away.
    head_want: u32,
    /// Queued nodes.
    len: usize,
    /// Refused nodes whose owners have not collected the refusal yet (the nodes not
    /// vacant are the queued ones and these).
    refused: usize,
    /// Permits that releases must absorb before anyone is admitted again: how far the
    /// permits in existence are above the limit after a shrink.
    pub(super) debt: u64,
    /// The ticket of the last waiter queued (tickets start at 1).
    tickets: u64,
    /// Waiters granted a permit so far (admissions through the queue, for statistics).
    handed: u64,
}

impl Queue {
    pub(super) const fn new() -> Self {
        Self {
            chunks: Vec::new(),
            holes: Vec::new(),
            live_chunks: 0,
            growing: NIL,
            free: NIL,
            head: NIL,
            tail: NIL,
            head_want: 0,
            len: 0,
            refused: 0,
            debt: 0,
            tickets: 0,
            handed: 0,
        }
    }

    /// Queued waiters.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Refused waiters that have not collected their refusal yet.
    pub(super) fn refused(&self) -> usize {
        self.refused
    }

    /// How many permits the oldest waiter asks for.
    #[inline]
    pub(super) fn front_want(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head_want)
    }

    /// Takes every queued waiter asking for more than `limit` permits out of the queue
    /// (all of them for `Refused::Closed`), marks it refused and pushes its waker to
    /// `wakers`.
    pub(super) fn refuse(&mut self, reason: Refused, limit: u64, wakers: &mut Vec<Waker>) {
        let mut index = self.head;
        while index != NIL {
            let node = self.node(index);
            let next = node.next;
            if reason == Refused::Closed || u64::from(node.want) > limit {
                self.unlink(index);
                let node = self.node_mut(index);
                node.refused = Some(reason);
                wakers.extend(node.waker.take());
                self.refused += 1;
            }
            index = next;
        }
    }

    /// The refusal of the waiter with `ticket` whose node was `index`, if it was refused:
    /// frees the node (the owner never looks at it again). `None`: not refused (still
    /// queued, or granted, in which case the node may be gone or someone else's).
    pub(super) fn collect(&mut self, index: usize, ticket: u64) -> Option<Refused> {
        let node = self
            .chunks
            .get(index >> CHUNK_BITS)?
            .as_deref()?
            .nodes
            .get(index & (CHUNK - 1))?;
        if node.ticket != ticket {
            return None;
        }
        let reason = node.refused?;
        self.node_mut(index).refused = None;
        self.refused -= 1;
        self.release(index);
        Some(reason)
    }

    fn chunk_mut(&mut self, index: usize) -> &mut Chunk {
        self.chunks[index >> CHUNK_BITS]
            .as_deref_mut()
            .expect("a node index points into a live chunk")
    }

    fn node(&self, index: usize) -> &Node {
        let chunk = self.chunks[index >> CHUNK_BITS]
            .as_deref()
            .expect("a node index points into a live chunk");
        &chunk.nodes[index & (CHUNK - 1)]
    }

    fn node_mut(&mut self, index: usize) -> &mut Node {
        &mut self.chunk_mut(index).nodes[index & (CHUNK - 1)]
    }

    /// Permits granted to waiters so far.
    pub(super) fn handed(&self) -> u64 {
        self.handed
    }

    /// Stores the owner's current waker in a queued node; returns the stale one, to be
    /// dropped after the lock is released.
    pub(super) fn update_waker(&mut self, index: usize, waker: &Waker) -> Option<Waker> {
        let slot = self
            .node_mut(index)
            .waker
            .as_mut()
            .expect("a waiter's node is freed only once it is granted or leaves");
        if slot.will_wake(waker) {
            None
        } else {
            Some(mem::replace(slot, waker.clone()))
        }
    }

    /// Queues a waiter asking for `want` permits at the back; returns its node's index and
    /// its ticket.
    pub(super) fn push_back(&mut self, waker: Waker, want: u32) -> (usize, u64) {
        self.tickets += 1;
        let ticket = self.tickets;
        let tail = self.tail;
        let index = self.allocate(Node {
            prev: tail,
            next: NIL,
            waker: Some(waker),
            ticket,
            want,
            refused: None,
        });
        if tail == NIL {
            self.head = index;
            self.head_want = want;
        } else {
            self.node_mut(tail).next = index;
        }
        self.tail = index;
        self.len += 1;
        (index, ticket)
    }

    /// Takes the oldest waiter out of the queue and frees its node (its owner, once it
    /// sees its ticket granted, never looks at it again); returns its waker and ticket.
    /// The queue must not be empty.
    pub(super) fn grant_front(&mut self) -> (Waker, u64) {
        let index = self.head;
        let node = self.node_mut(index);
        let next = node.next;
        let ticket = node.ticket;
        let waker = node.waker.take().expect("only queued nodes are linked");
        self.head = next;
        if next == NIL {
            self.tail = NIL;
        } else {
            let next = self.node_mut(next);
            next.prev = NIL;
            self.head_want = next.want;
        }
        self.len -= 1;
        self.handed += 1;
        self.release(index);
        (waker, ticket)
    }

    /// Takes a queued node out of the queue and frees it; returns its waker.
    pub(super) fn remove(&mut self, index: usize) -> Waker {
        self.unlink(index);
        let waker = self
            .node_mut(index)
            .waker
            .take()
            .expect("a waiter's node is freed only once it is granted or leaves");
        self.release(index);
        waker
    }

    fn unlink(&mut self, index: usize) {
        let Node { prev, next, .. } = *self.node(index);
        if prev == NIL {
            self.head = next;
            if next != NIL {
                self.head_want = self.node(next).want;
            }
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
        self.len -= 1;
    }

    /// Stores `node` in a vacant slot: from the free list, else a new slot of the growing
    /// chunk; returns its index.
    fn allocate(&mut self, node: Node) -> usize {
        if self.free != NIL {
            // One look-up of the chunk for the count, the free-list link and the store.
            // The free list's new first node keeps a stale `prev`: the first node is told
            // by `self.free`, never by its `prev`.
            let index = self.free;
            let chunk = self.chunk_mut(index);
            chunk.used += 1;
            let vacant = mem::replace(&mut chunk.nodes[index & (CHUNK - 1)], node);
            self.free = vacant.next;
            return index;
        }
        if self.growing == NIL {
            self.growing = self.new_chunk();
        }
        let growing = self.growing;
        let chunk = self.chunks[growing]
            .as_deref_mut()
            .expect("the growing chunk is live");
        chunk.nodes.push(node);
        chunk.used += 1;
        let offset = chunk.nodes.len() - 1;
        if chunk.nodes.len() == CHUNK {
            self.growing = NIL;
        }
        (growing << CHUNK_BITS) | offset
    }

    /// Allocates an empty chunk in a hole of the directory or at its end.
    fn new_chunk(&mut self) -> usize {
        let chunk = Some(Box::new(Chunk {
            nodes: Vec::new(),
            used: 0,
        }));
        self.live_chunks += 1;
        while let Some(hole) = self.holes.pop() {
            if hole < self.chunks.len() && self.chunks[hole].is_none() {
                self.chunks[hole] = chunk;
                return hole;
            }
        }
        self.chunks.push(chunk);
        self.chunks.len() - 1
    }

    /// Puts an unlinked node whose waker is already taken on the free list, and gives
    /// memory back when that empties its chunk or the whole queue.
    fn release(&mut self, index: usize) {
        let free = self.free;
        // One look-up of the chunk for the link and the count. (The free list's first node
        // needs no `prev`: it is told by `self.free`.)
        let chunk = self.chunk_mut(index);
        chunk.nodes[index & (CHUNK - 1)].next = free;
        chunk.used -= 1;
        let emptied = chunk.used == 0;
        if free != NIL {
            self.node_mut(free).prev = index;
        }
        self.free = index;
        if !emptied {
            return;
        }
        if self.len == 0 && self.refused == 0 {
            if self.chunks.len() > 1 || self.capacity() > KEEP_WHEN_EMPTY {
                // A burst is over: give all its memory back (the counters go on: a
                // ticket is never issued twice).
                *self = Self {
                    tickets: self.tickets,
                    handed: self.handed,
                    debt: self.debt,
                    ..Self::new()
                };
            }
        } else if self.live_chunks > 1 {
            self.free_chunk(index >> CHUNK_BITS);
        }
    }

    /// Frees chunk `id`, all of whose nodes are vacant.
    fn free_chunk(&mut self, id: usize) {
        // Take its nodes off the free list first, while they can still be reached (their
        // neighbours on the list may be in the same chunk).
        let len = self.chunks[id]
            .as_ref()
            .map_or(0, |chunk| chunk.nodes.len());
        for offset in 0..len {
            let index = (id << CHUNK_BITS) | offset;
            let Node { prev, next, .. } = *self.node(index);
            if self.free == index {
                self.free = next;
            } else {
                self.node_mut(prev).next = next;
            }
            if next != NIL {
                self.node_mut(next).prev = prev;
            }
        }
        self.chunks[id] = None;
        self.live_chunks -= 1;
        if self.growing == id {
            self.growing = NIL;
        }
        if id + 1 < self.chunks.len() {
            self.holes.push(id);
            return;
        }
        while self.chunks.last().is_some_and(Option::is_none) {
            self.chunks.pop();
        }
        // Amortised: only after the directory lost three quarters of its length.
        if self.chunks.len() < self.chunks.capacity() / 4 {
            self.chunks.shrink_to(self.chunks.len() * 2);
            let len = self.chunks.len();
            self.holes.retain(|&hole| hole < len);
            self.holes.shrink_to(self.holes.len() * 2);
        }
    }

    /// Node slots allocated (vacant or not).
    fn capacity(&self) -> usize {
        self.chunks
            .iter()
            .flatten()
            .map(|chunk| chunk.nodes.capacity())
            .sum()
    }

    /// Bytes of memory the queue holds, for the tests of its memory use.
    #[cfg(test)]
    pub(super) fn footprint(&self) -> usize {
        self.capacity() * mem::size_of::<Node>()
            + self.live_chunks * mem::size_of::<Chunk>()
            + self.chunks.capacity() * mem::size_of::<Option<Box<Chunk>>>()
            + self.holes.capacity() * mem::size_of::<usize>()
    }
}

/// Wakers to wake once the lock is released; a fixed array, so no allocation.
pub(super) struct WakeList {
    wakers: [Option<Waker>; 8],
    len: usize,
}

impl WakeList {
    pub(super) fn new() -> Self {
        Self {
            wakers: [const { None }; 8],
            len: 0,
        }
    }

    pub(super) fn is_full(&self) -> bool {
        self.len == self.wakers.len()
    }

    pub(super) fn push(&mut self, waker: Waker) {
        self.wakers[self.len] = Some(waker);
        self.len += 1;
    }

    pub(super) fn wake_all(&mut self) {
        for waker in self.wakers[..self.len].iter_mut() {
            if let Some(waker) = waker.take() {
                waker.wake();
            }
        }
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(queue: &mut Queue, count: usize) -> Vec<usize> {
        (0..count)
            .map(|_| queue.push_back(Waker::noop().clone(), 1).0)
            .collect()
    }

    /// Regression: after a burst of 1,000,000 waiters of which one stayed, the flat node
    /// `Vec` kept all 1,000,000 nodes (about 40 MB) until the last waiter left.
    #[test]
    fn a_burst_down_to_one_waiter_gives_its_memory_back() {
        const BURST: usize = 1_000_000;
        for stays in [0, BURST / 2, BURST - 1] {
            let mut queue = Queue::new();
            let nodes = queued(&mut queue, BURST);
            assert!(queue.footprint() > 30 << 20, "{}", queue.footprint());
            for (position, &index) in nodes.iter().enumerate() {
                if position != stays {
                    queue.remove(index);
                }
            }
            assert_eq!(queue.len(), 1);
            assert!(
                queue.footprint() < 1 << 20,
                "{} bytes kept for one waiter (it was number {stays})",
                queue.footprint()
            );
            assert_eq!(queue.grant_front().1, stays as u64 + 1);
            assert_eq!(
                queue.footprint(),
                0,
                "{stays}: {} chunks",
                queue.live_chunks
            );
        }
    }

    #[test]
    fn the_order_survives_churn_and_granted_nodes_are_freed() {
        let mut queue = Queue::new();
        let mut live: std::collections::VecDeque<usize> = queued(&mut queue, 5 * CHUNK).into();
        let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
        for round in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            match rng % 3 {
                0 if !live.is_empty() => {
                    // Leave from anywhere.
                    let at = (rng >> 8) as usize % live.len();
                    let index = live.remove(at).unwrap();
                    queue.remove(index);
                }
                1 if !live.is_empty() => {
                    let index = live.pop_front().unwrap();
                    assert_eq!(queue.head, index, "round {round}");
                    let ticket = queue.node(index).ticket;
                    assert_eq!(queue.grant_front().1, ticket);
                }
                _ => live.extend(queued(&mut queue, (rng >> 20) as usize % 8)),
            }
            assert_eq!(queue.len(), live.len());
        }
        while let Some(index) = live.pop_front() {
            assert_eq!(queue.head, index);
            queue.remove(index);
        }
        assert_eq!((queue.head, queue.tail, queue.len), (NIL, NIL, 0));
    }
}
