//! The fresh items of every key in one slab of nodes: a key's queue is a ring of nodes
//! named by its last one, whose link leads to its first.
//!
//! A key's entry holds 8 bytes for its queue (its last node and its length) and no buffer
//! of its own. A crawl keeps its hosts' entries long after their items started (adapting,
//! hinted, with a breaker), and a buffer per host, kept as long as the host, cost more
//! than the queue's bookkeeping; here the nodes are as many as the items waiting at once
//! (the window bounds them), reused through a free list.
//!
//! Invariants: every node is in exactly one key's ring or in the free list; a ring holds
//! as many nodes as its queue's `len`, each holding an item; a free node holds none.

/// No node: the end of the free list.
const NONE: u32 = u32::MAX;

/// One key's queue of fresh items: where its ring is in the [`Queues`] it belongs to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Queue {
    /// The ring's last node (meaningless while `len` is 0).
    last: u32,
    len: u32,
}

impl Queue {
    /// A queue with no item.
    pub(super) const EMPTY: Self = Self { last: NONE, len: 0 };

    #[inline(always)]
    pub(super) const fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub(super) const fn len(&self) -> usize {
        self.len as usize
    }
}

/// One node: an item and the node after it in its ring (or, free, in the free list).
#[derive(Debug)]
struct Node<T> {
    item: Option<T>,
    next: u32,
}

/// The nodes of every key's queue.
#[derive(Debug)]
pub(super) struct Queues<T> {
    nodes: Vec<Node<T>>,
    /// The first free node ([`NONE`]: none; the next push adds one).
    free: u32,
}

impl<T> Queues<T> {
    pub(super) const fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: NONE,
        }
    }

    /// Puts `item` at the back of `queue`.
    ///
    /// # Panics
    ///
    /// With `u32::MAX` items waiting at once (a window no map reaches).
    #[inline(always)]
    pub(super) fn push_back(&mut self, queue: &mut Queue, item: T) {
        let reused = self.free != NONE;
        let at = if reused {
            self.free
        } else {
            u32::try_from(self.nodes.len())
                .ok()
                .filter(|&at| at != NONE)
                .expect("tollgate: more than u32::MAX - 1 items waiting at once")
        };
        // The new node goes between the last node and the first (taking the last's link),
        // or makes a ring of one.
        let next = if queue.len > 0 {
            std::mem::replace(&mut self.nodes[queue.last as usize].next, at)
        } else {
            at
        };
        let node = Node {
            item: Some(item),
            next,
        };
        if reused {
            let slot = &mut self.nodes[at as usize];
            self.free = slot.next;
            *slot = node;
        } else {
            self.nodes.push(node);
        }
        queue.last = at;
        queue.len += 1;
    }

    /// Takes the item at the front of `queue`; `None` if it has none.
    #[inline(always)]
    pub(super) fn pop_front(&mut self, queue: &mut Queue) -> Option<T> {
        if queue.len == 0 {
            return None;
        }
        let last = queue.last as usize;
        let first = self.nodes[last].next;
        let free = Node {
            item: None,
            next: self.free,
        };
        let node = std::mem::replace(&mut self.nodes[first as usize], free);
        self.free = first;
        queue.len -= 1;
        if queue.len > 0 {
            self.nodes[last].next = node.next;
        }
        debug_assert!(node.item.is_some(), "a node of a ring holds an item");
        node.item
    }

    /// Takes every item of `queue`, front first, into `into`.
    pub(super) fn drain_into(&mut self, queue: &mut Queue, into: &mut Vec<T>) {
        into.reserve(queue.len());
        while let Some(item) = self.pop_front(queue) {
            into.push(item);
        }
    }

    /// Drops every item of every queue (the queues themselves are forgotten by the caller).
    pub(super) fn clear(&mut self) {
        self.nodes.clear();
        self.free = NONE;
    }
}

#[cfg(test)]
mod tests {
    use super::{Queue, Queues};

    #[test]
    fn queues_keep_their_order_and_reuse_nodes() {
        let mut queues = Queues::new();
        let (mut a, mut b) = (Queue::EMPTY, Queue::EMPTY);
        for i in 0..5 {
            queues.push_back(&mut a, ("a", i));
            queues.push_back(&mut b, ("b", i));
        }
        assert_eq!((a.len(), b.len()), (5, 5));
        assert_eq!(queues.pop_front(&mut a), Some(("a", 0)));
        assert_eq!(queues.pop_front(&mut b), Some(("b", 0)));
        // Nodes freed by one queue serve another; the slab does not grow.
        queues.push_back(&mut b, ("b", 5));
        queues.push_back(&mut a, ("a", 5));
        assert_eq!(queues.nodes.len(), 10);
        let mut taken = Vec::new();
        queues.drain_into(&mut a, &mut taken);
        assert_eq!(taken, (1..6).map(|i| ("a", i)).collect::<Vec<_>>());
        assert!(a.is_empty());
        assert_eq!(queues.pop_front(&mut a), None);
        // A queue emptied and filled again is a ring of its new items only.
        queues.push_back(&mut a, ("a", 9));
        assert_eq!(queues.pop_front(&mut a), Some(("a", 9)));
        let order: Vec<_> = std::iter::from_fn(|| queues.pop_front(&mut b)).collect();
        assert_eq!(order, (1..6).map(|i| ("b", i)).collect::<Vec<_>>());
        assert_eq!(queues.nodes.len(), 10, "every node was reused");
    }
}
