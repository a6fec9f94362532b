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
//!
//! Queued nodes are in one of two lines, each in ticket (arrival) order: *in line*, the
//! waiters whose request fits the limit in force (grants go to its head), and *aside*, the
//! waiters whose request is above it. A resize moves nodes between the two, each to its
//! place by ticket, so a waiter that steps back in line is where it would have been had it
//! never stepped aside.

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
    /// Links of its line while queued, free-list links while vacant (the free list's
    /// first node has a stale `prev`: it is known as `Queue::free`).
    prev: usize,
    next: usize,
    /// Which line it is queued in: aside (its request is above the limit in force) or in
    /// line.
    aside: bool,
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
    /// The max weight fell below what the waiter asks for.
    OverLimit,
}

/// What became of a waiter, as its node tells (see [`Queue::status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    /// Still queued, in line or aside.
    Queued,
    /// Refused (the refusal is now collected).
    Refused(Refused),
    /// Granted: its node was freed by the granter.
    Granted,
}

/// One line of queued nodes, oldest first.
#[derive(Clone, Copy)]
struct Line {
    head: usize,
    tail: usize,
    len: usize,
}

impl Line {
    const EMPTY: Self = Self {
        head: NIL,
        tail: NIL,
        len: 0,
    };
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
    /// The waiters whose request fits the limit in force: grants go to its head only.
    line: Line,
    /// The waiters that stepped aside: their request is above the limit in force.
    aside: Line,
    /// What the head of the line wants (valid while `line.head != NIL`): kept here
    /// because every release with waiters asks, and the node itself is two indirections
    /// away.
    head_want: u32,
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
    /// Whether the max weight was set by the user (`set_max_weight`), rather than
    /// following the highest limit so far.
    pub(super) max_weight_set: bool,
}

impl Queue {
    pub(super) const fn new() -> Self {
        Self {
            chunks: Vec::new(),
            holes: Vec::new(),
            live_chunks: 0,
            growing: NIL,
            free: NIL,
            line: Line::EMPTY,
            aside: Line::EMPTY,
            head_want: 0,
            refused: 0,
            debt: 0,
            tickets: 0,
            handed: 0,
            max_weight_set: false,
        }
    }

    /// Waiters in line (their request fits the limit in force).
    pub(super) fn len(&self) -> usize {
        self.line.len
    }

    /// Waiters in line or aside.
    pub(super) fn waiting(&self) -> usize {
        self.line.len + self.aside.len
    }

    fn line(&self, aside: bool) -> &Line {
        if aside { &self.aside } else { &self.line }
    }

    fn line_mut(&mut self, aside: bool) -> &mut Line {
        if aside {
            &mut self.aside
        } else {
            &mut self.line
        }
    }

    /// Refused waiters that have not collected their refusal yet.
    pub(super) fn refused(&self) -> usize {
        self.refused
    }

    /// How many permits the oldest waiter in line asks for.
    #[inline]
    pub(super) fn front_want(&self) -> Option<u32> {
        (self.line.head != NIL).then_some(self.head_want)
    }

    /// The highest ticket such that no waiter with it or a lower one is queued (in line
    /// or aside): each of those was granted, refused, or left.
    #[cold]
    pub(super) fn passed(&self) -> u64 {
        let in_line = (self.line.head != NIL).then(|| self.node(self.line.head).ticket);
        let aside = (self.aside.head != NIL).then(|| self.node(self.aside.head).ticket);
        match (in_line, aside) {
            (Some(a), Some(b)) => a.min(b) - 1,
            (Some(oldest), None) | (None, Some(oldest)) => oldest - 1,
            (None, None) => self.tickets,
        }
    }

    /// Takes every queued waiter (in line or aside) asking for more than `max` permits out
    /// of the queue (all of them for `Refused::Closed`), marks it refused and pushes its
    /// waker to `wakers`.
    pub(super) fn refuse(&mut self, reason: Refused, max: u64, wakers: &mut Vec<Waker>) {
        for aside in [false, true] {
            let mut index = self.line(aside).head;
            while index != NIL {
                let node = self.node(index);
                let next = node.next;
                if reason == Refused::Closed || u64::from(node.want) > max {
                    self.unlink(index);
                    let node = self.node_mut(index);
                    node.refused = Some(reason);
                    wakers.extend(node.waker.take());
                    self.refused += 1;
                }
                index = next;
            }
        }
    }

    /// Moves every waiter in line asking for more than `limit` aside; returns whether any
    /// moved.
    pub(super) fn step_aside(&mut self, limit: u64) -> bool {
        self.shift(false, |want| u64::from(want) > limit)
    }

    /// Moves every waiter aside asking for `limit` or fewer permits back in line; returns
    /// whether any moved.
    pub(super) fn step_back(&mut self, limit: u64) -> bool {
        self.shift(true, |want| u64::from(want) <= limit)
    }

    /// Moves the nodes of one line (aside if `from_aside`) that `moves` picks by their
    /// request into the other, each at its place by ticket. Both lines are in ticket
    /// order and the moved nodes come in ticket order, so one cursor walks the other line
    /// once: O(both lines).
    fn shift(&mut self, from_aside: bool, moves: impl Fn(u32) -> bool) -> bool {
        let mut moved = false;
        let mut before = self.line(!from_aside).head;
        let mut index = self.line(from_aside).head;
        while index != NIL {
            let Node {
                next, want, ticket, ..
            } = *self.node(index);
            if moves(want) {
                self.unlink(index);
                while before != NIL && self.node(before).ticket < ticket {
                    before = self.node(before).next;
                }
                self.link(index, !from_aside, before);
                moved = true;
            }
            index = next;
        }
        moved
    }

    /// What became of the waiter with `ticket` whose node was `index`. A refusal is
    /// collected: the node is freed (its owner never looks at it again). A node is freed
    /// only by its owner (which has not, since it asks) or by a grant, so a node that is
    /// vacant, gone, or someone else's (another ticket) means granted.
    pub(super) fn status(&mut self, index: usize, ticket: u64) -> Status {
        let Some(node) = self
            .chunks
            .get(index >> CHUNK_BITS)
            .and_then(|chunk| chunk.as_deref())
            .and_then(|chunk| chunk.nodes.get(index & (CHUNK - 1)))
        else {
            return Status::Granted;
        };
        if node.ticket != ticket {
            return Status::Granted;
        }
        if let Some(reason) = node.refused {
            self.node_mut(index).refused = None;
            self.refused -= 1;
            self.release(index);
            return Status::Refused(reason);
        }
        if node.waker.is_some() {
            Status::Queued
        } else {
            Status::Granted
        }
    }

    // Inlined everywhere: these are a shift and two indexings, on every hand-off.
    #[inline(always)]
    fn chunk_mut(&mut self, index: usize) -> &mut Chunk {
        self.chunks[index >> CHUNK_BITS]
            .as_deref_mut()
            .expect("a node index points into a live chunk")
    }

    #[inline(always)]
    fn node(&self, index: usize) -> &Node {
        let chunk = self.chunks[index >> CHUNK_BITS]
            .as_deref()
            .expect("a node index points into a live chunk");
        &chunk.nodes[index & (CHUNK - 1)]
    }

    #[inline(always)]
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

    /// Queues a waiter asking for `want` permits at the back of the line; returns its
    /// node's index and its ticket.
    pub(super) fn push_back(&mut self, waker: Waker, want: u32) -> (usize, u64) {
        self.tickets += 1;
        let ticket = self.tickets;
        let tail = self.line.tail;
        let index = self.allocate(Node {
            prev: tail,
            next: NIL,
            aside: false,
            waker: Some(waker),
            ticket,
            want,
            refused: None,
        });
        if tail == NIL {
            self.line.head = index;
            self.head_want = want;
        } else {
            self.node_mut(tail).next = index;
        }
        self.line.tail = index;
        self.line.len += 1;
        (index, ticket)
    }

    /// Queues a waiter asking for `want` permits at the back of the waiters aside;
    /// returns its node's index and its ticket.
    #[cold]
    pub(super) fn push_aside(&mut self, waker: Waker, want: u32) -> (usize, u64) {
        self.tickets += 1;
        let ticket = self.tickets;
        let index = self.allocate(Node {
            prev: NIL,
            next: NIL,
            aside: true,
            waker: Some(waker),
            ticket,
            want,
            refused: None,
        });
        self.link(index, true, NIL);
        (index, ticket)
    }

    /// Takes the oldest waiter in line out of the queue and frees its node (its owner,
    /// once it learns of its grant, never looks at it again); returns its waker and a
    /// ticket that every queued waiter is after (its own, or [`passed`](Self::passed)
    /// while an older waiter is aside). The line must not be empty.
    pub(super) fn grant_front(&mut self) -> (Waker, u64) {
        let index = self.line.head;
        let node = self.node_mut(index);
        let next = node.next;
        let ticket = node.ticket;
        let waker = node.waker.take().expect("only queued nodes are linked");
        self.line.head = next;
        if next == NIL {
            self.line.tail = NIL;
        } else {
            let next = self.node_mut(next);
            next.prev = NIL;
            self.head_want = next.want;
        }
        self.line.len -= 1;
        self.handed += 1;
        // With nobody aside, the line holds every waiter, all after this one.
        let passed = if self.aside.head == NIL {
            ticket
        } else {
            self.passed()
        };
        self.release(index);
        (waker, passed)
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

    /// Takes a queued node out of its line (it stays allocated).
    fn unlink(&mut self, index: usize) {
        let Node {
            prev, next, aside, ..
        } = *self.node(index);
        if prev == NIL {
            self.line_mut(aside).head = next;
            if !aside && next != NIL {
                self.head_want = self.node(next).want;
            }
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            self.line_mut(aside).tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
        self.line_mut(aside).len -= 1;
    }

    /// Links an unlinked queued node into a line (aside if `aside`), before `before`
    /// (`NIL`: at the back).
    fn link(&mut self, index: usize, aside: bool, before: usize) {
        let prev = if before == NIL {
            self.line(aside).tail
        } else {
            self.node(before).prev
        };
        let node = self.node_mut(index);
        node.prev = prev;
        node.next = before;
        node.aside = aside;
        let want = node.want;
        if prev == NIL {
            self.line_mut(aside).head = index;
            if !aside {
                self.head_want = want;
            }
        } else {
            self.node_mut(prev).next = index;
        }
        if before == NIL {
            self.line_mut(aside).tail = index;
        } else {
            self.node_mut(before).prev = index;
        }
        self.line_mut(aside).len += 1;
    }

    /// Stores `node` in a vacant slot: from the free list, else a new slot of the growing
    /// chunk; returns its index.
    #[inline(always)]
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
        if self.waiting() == 0 && self.refused == 0 {
            if self.chunks.len() > 1 || self.capacity() > KEEP_WHEN_EMPTY {
                // A burst is over: give all its memory back (the counters go on: a
                // ticket is never issued twice).
                *self = Self {
                    tickets: self.tickets,
                    handed: self.handed,
                    debt: self.debt,
                    max_weight_set: self.max_weight_set,
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
    use tollgate_testkit::Rng;

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

    /// The tickets of one line, walked from its head, checking the back links.
    fn walk(queue: &Queue, aside: bool) -> Vec<u64> {
        let line = queue.line(aside);
        let (mut tickets, mut index, mut prev) = (Vec::new(), line.head, NIL);
        while index != NIL {
            let node = queue.node(index);
            assert_eq!((node.prev, node.aside), (prev, aside));
            tickets.push(node.ticket);
            (prev, index) = (index, node.next);
        }
        assert_eq!((line.tail, line.len), (prev, tickets.len()));
        tickets
    }

    /// Against a model (every queued waiter by ticket, with its request and line): waiters
    /// leave from anywhere, are granted from the head of the line, arrive, and step aside
    /// and back as a limit moves; both lines stay in ticket order, and the head's cached
    /// request and the tickets passed stay right.
    #[test]
    fn the_order_survives_churn_and_steps_aside_and_granted_nodes_are_freed() {
        use std::collections::BTreeMap;
        let mut queue = Queue::new();
        // ticket -> (index, want)
        let mut model: BTreeMap<u64, (usize, u32)> = BTreeMap::new();
        let mut limit = 8_u64;
        let mut rng = Rng::new(1);
        for round in 0..8_000 {
            match rng.below(6) {
                0 if !model.is_empty() => {
                    // Leave from anywhere, in line or aside.
                    let at = rng.below(model.len() as u64) as usize;
                    let ticket = *model.keys().nth(at).unwrap();
                    let (index, _) = model.remove(&ticket).unwrap();
                    queue.remove(index);
                }
                1 | 2 if queue.len() != 0 => {
                    let (&ticket, &(index, want)) = model
                        .iter()
                        .find(|(_, (_, want))| u64::from(*want) <= limit)
                        .unwrap();
                    assert_eq!(queue.line.head, index, "round {round}");
                    assert_eq!(queue.head_want, want);
                    model.remove(&ticket);
                    let aside = model.keys().next().is_some_and(|&oldest| oldest < ticket);
                    let (_, passed) = queue.grant_front();
                    if aside {
                        // Held back by the oldest waiter, which is aside.
                        let oldest = *model.keys().next().unwrap();
                        assert_eq!(passed, oldest - 1, "round {round}");
                    } else {
                        assert!(passed >= ticket, "round {round}");
                    }
                    assert!(model.keys().all(|&queued| queued > passed));
                }
                3 => {
                    limit = 1 + rng.below(16);
                    queue.step_aside(limit);
                    queue.step_back(limit);
                }
                // Up to a few chunks of waiters, so that chunks are freed and reused.
                _ if model.len() < 2 * CHUNK => {
                    for _ in 0..rng.below(8) {
                        let want = 1 + rng.below(16) as u32;
                        let waker = Waker::noop().clone();
                        let (index, ticket) = if u64::from(want) > limit {
                            queue.push_aside(waker, want)
                        } else {
                            queue.push_back(waker, want)
                        };
                        model.insert(ticket, (index, want));
                    }
                }
                _ => {}
            }
            let fits = |want: &u32| u64::from(*want) <= limit;
            let in_line: Vec<u64> = model
                .iter()
                .filter(|(_, (_, want))| fits(want))
                .map(|(t, _)| *t)
                .collect();
            let aside: Vec<u64> = model
                .iter()
                .filter(|(_, (_, want))| !fits(want))
                .map(|(t, _)| *t)
                .collect();
            assert_eq!(walk(&queue, false), in_line, "round {round}");
            assert_eq!(walk(&queue, true), aside, "round {round}");
            assert_eq!(queue.waiting(), model.len());
            if let Some(&head) = in_line.first() {
                assert_eq!(queue.head_want, model[&head].1);
            }
        }
        for (_, (index, _)) in model {
            queue.remove(index);
        }
        assert_eq!(queue.waiting(), 0);
        assert_eq!(queue.footprint(), 0, "a burst's memory given back");
    }
}
