//! [`PBTreeMap<K, V>`]: an ordered map as a B+ tree of heap blocks, with range scans.
//!
//! Nodes hold up to `B` keys. A node block: a 16-byte header (`n: u32`, `leaf: u32`,
//! `next: u64`, the next leaf for scans), then `B` keys, then `B` values (leaf) or `B + 1`
//! child offsets (inner node). Inserts split full nodes on the way down (top-down), so one
//! pass suffices. Removal rebalances bottom-up: a node left with fewer than `MIN` keys (not
//! the root) takes one entry from a sibling through their parent, or, when both fit in one
//! node, is merged with it (the right one is freed, and the parent loses a key, which may
//! underflow in turn); a root inner node left without a key gives way to its only child. So
//! every node but the root is at least about half full, and deletes return their space.
//! Trees written before merging existed (format unchanged) may hold inner nodes with a single
//! child and no key: they are read as usual, rebalanced as they are met, and an empty leaf
//! under such a node is unlinked and freed as before. The tree's height is bounded by
//! `MAX_HEIGHT`, and every walk by the node count, so a corrupted PMO yields `Corrupt`, never a
//! loop.
//!
//! Why unsafe is allowed here: nodes are read and written through raw pointers into the
//! map's own node blocks (resolved by `Ctx`, owned by this map only).
#![allow(unsafe_code)]

use crate::{Ctx, Persistent, Result, TypedError};
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

/// Keys per node.
pub const B: usize = 32;
/// Fewest keys a node other than the root keeps after a removal (splits leave 15 or more).
const MIN: usize = B / 2 - 1;
const HDR: usize = 16;
const MAX_HEIGHT: u64 = 40;

/// An ordered map in the persistent heap. Keys are plain `Copy + Ord` data; values may own
/// blocks. The zero value is empty.
#[repr(C)]
pub struct PBTreeMap<K: Persistent, V: Persistent> {
    root: u64,
    len: u64,
    /// Levels above the leaves (0: the root is a leaf).
    height: u64,
    /// Node blocks (for walk bounds).
    nodes: u64,
    heap: u64,
    /// Where this header lives (its offset), recorded when it first allocates: 0 unbound.
    home: u64,
    _kv: PhantomData<(K, V)>,
}

impl<K: Persistent, V: Persistent> Default for PBTreeMap<K, V> {
    fn default() -> Self {
        PBTreeMap {
            root: 0,
            len: 0,
            height: 0,
            nodes: 0,
            heap: 0,
            home: 0,
            _kv: PhantomData,
        }
    }
}

impl<K: Persistent, V: Persistent> std::fmt::Debug for PBTreeMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PBTreeMap({:#x}, len {}, height {})",
            self.root, self.len, self.height
        )
    }
}

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// A node, resolved: raw pointers into its block.
struct Node<K, V> {
    off: u64,
    p: *mut u8,
    _kv: PhantomData<(K, V)>,
}

impl<K, V> Clone for Node<K, V> {
    fn clone(&self) -> Self {
        Node {
            off: self.off,
            p: self.p,
            _kv: PhantomData,
        }
    }
}

impl<K: Persistent + Copy + Ord, V: Persistent> Node<K, V> {
    const KEYS: usize = align_up_c(HDR, std::mem::align_of::<K>());
    const VALS: usize = align_up_c(
        Self::KEYS + B * std::mem::size_of::<K>(),
        std::mem::align_of::<V>(),
    );
    const KIDS: usize = align_up_c(Self::KEYS + B * std::mem::size_of::<K>(), 8);
    const LEAF_BYTES: usize = Self::VALS + B * std::mem::size_of::<V>();
    const INNER_BYTES: usize = Self::KIDS + (B + 1) * 8;
    const ALIGN: usize = max(8, max(std::mem::align_of::<K>(), std::mem::align_of::<V>()));

    #[inline]
    fn bytes(leaf: bool) -> usize {
        if leaf {
            Self::LEAF_BYTES
        } else {
            Self::INNER_BYTES
        }
    }

    /// Resolve node `off`, checking its header against what the caller expects.
    #[inline]
    fn at(h: &Ctx, off: u64, leaf: bool) -> Result<Self> {
        let p = h.ptr::<u8>(off, Self::bytes(leaf))?;
        // Nodes are allocated ALIGN-aligned; the header (u32, u64) and the arrays are read in
        // place, so an offset altered outside pmo must not yield a misaligned pointer.
        if !(p as usize).is_multiple_of(Self::ALIGN) {
            return Err(TypedError::Corrupt("misaligned offset"));
        }
        let n = Node {
            off,
            p,
            _kv: PhantomData,
        };
        if n.n() > B || (n.is_leaf() != leaf) {
            return Err(TypedError::Corrupt("B-tree node header"));
        }
        Ok(n)
    }

    fn alloc(h: &Ctx, leaf: bool) -> Result<Self> {
        let off = h.alloc(Self::bytes(leaf), Self::ALIGN)?;
        let n = Node {
            off,
            p: h.ptr::<u8>(off, Self::bytes(leaf))?,
            _kv: PhantomData,
        };
        // SAFETY: the header of a fresh, zeroed block we own.
        unsafe { *(n.p.add(4) as *mut u32) = leaf as u32 };
        Ok(n)
    }

    #[inline]
    fn n(&self) -> usize {
        // SAFETY: the header lies inside the resolved block.
        unsafe { *(self.p as *const u32) as usize }
    }
    fn set_n(&self, n: usize) {
        // SAFETY: as above; the map owning the node is borrowed exclusively by the caller.
        unsafe { *(self.p as *mut u32) = n as u32 }
    }
    #[inline]
    fn is_leaf(&self) -> bool {
        // SAFETY: as above.
        unsafe { *(self.p.add(4) as *const u32) == 1 }
    }
    fn next(&self) -> u64 {
        // SAFETY: as above (8-aligned: blocks are at least 8-aligned).
        unsafe { *(self.p.add(8) as *const u64) }
    }
    fn set_next(&self, off: u64) {
        // SAFETY: as above.
        unsafe { *(self.p.add(8) as *mut u64) = off }
    }
    #[inline]
    fn keys(&self) -> *mut K {
        // SAFETY: KEYS + B keys lie inside the block (both node sizes include them).
        unsafe { self.p.add(Self::KEYS) as *mut K }
    }
    #[inline]
    fn key(&self, i: usize) -> K {
        debug_assert!(i < B);
        // SAFETY: `i < B`: inside the key array.
        unsafe { *self.keys().add(i) }
    }
    #[inline]
    fn keys_slice(&self) -> &[K] {
        // SAFETY: `n() <= B` (checked at resolve and maintained), initialized (zeroed or
        // written) keys; any bit pattern is a valid K.
        unsafe { std::slice::from_raw_parts(self.keys(), self.n()) }
    }
    #[inline]
    fn vals(&self) -> *mut V {
        debug_assert!(self.is_leaf());
        // SAFETY: leaf blocks hold B values at VALS.
        unsafe { self.p.add(Self::VALS) as *mut V }
    }
    #[inline]
    fn kids(&self) -> *mut u64 {
        debug_assert!(!self.is_leaf());
        // SAFETY: inner blocks hold B + 1 children at KIDS.
        unsafe { self.p.add(Self::KIDS) as *mut u64 }
    }
    #[inline]
    fn kid(&self, i: usize) -> u64 {
        debug_assert!(i <= B);
        // SAFETY: `i <= B`: inside the child array.
        unsafe { *self.kids().add(i) }
    }
    fn touch(&self, h: &Ctx) -> Result<()> {
        h.touch(self.p, Self::bytes(self.is_leaf()))
    }
    /// The node's bytes, for [`Ctx::touch_many`].
    fn range(&self) -> (*const u8, usize) {
        (self.p, Self::bytes(self.is_leaf()))
    }
}

/// What [`PBTreeMap::walk`] calls for each node.
type NodeVisitor<'f, K, V> = dyn FnMut(&Node<K, V>, &Ctx) -> Result<()> + 'f;

const fn align_up_c(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

// SAFETY: keys plain `Copy` data, values as their impls; the header is six u64 with no padding;
// nodes are checked when resolved. It owns every node and its values' blocks.
unsafe impl<K, V> Persistent for PBTreeMap<K, V>
where
    K: Persistent + Copy + Ord,
    V: Persistent,
{
    const LAYOUT: u64 = crate::layout::mix(
        crate::layout::mix(
            crate::layout::hash_str(crate::layout::SEED, "PBTreeMap/2"),
            K::LAYOUT,
        ),
        V::LAYOUT,
    );
    const OWNS_BLOCKS: bool = true;
    const LAYOUT_OK: () = {
        let () = K::LAYOUT_OK;
        V::LAYOUT_OK
    };
    fn for_each_block(&self, h: &Ctx, f: &mut dyn FnMut(u64)) -> Result<()> {
        // The walk (what `TypedHeap::check` runs) also counts nodes and entries: a header
        // whose counts were altered would otherwise pass until an update trusts them.
        let (mut nodes, mut entries) = (0u64, 0u64);
        self.walk(h, &mut |node, h| {
            f(node.off);
            nodes += 1;
            if node.is_leaf() {
                entries += node.n() as u64;
                if V::OWNS_BLOCKS {
                    for i in 0..node.n() {
                        // SAFETY: `i < n <= B`: a value of the owned leaf; shared borrow.
                        unsafe { &*node.vals().add(i) }.for_each_block(h, f)?;
                    }
                }
            }
            Ok(())
        })?;
        if nodes != self.nodes || entries != self.len {
            return Err(TypedError::Corrupt("B-tree counts disagree with its nodes"));
        }
        Ok(())
    }
    fn release(&mut self, h: &Ctx) -> Result<()> {
        self.clear(h)
    }
    fn rebind(&mut self, h: &Ctx) -> Result<()> {
        h.rebind_handle(self, |s| &mut s.home)
    }
}

impl<K, V> PBTreeMap<K, V>
where
    K: Persistent + Copy + Ord,
    V: Persistent,
{
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn check(&self, h: &Ctx) -> Result<()> {
        h.check_handle(
            (self as *const Self).cast(),
            std::mem::size_of::<Self>(),
            self.heap,
            self.home,
        )?;
        // A node takes more than 64 bytes of an address space of less than 2^64 bytes, and a
        // leaf holds at most B entries: counts beyond these were altered outside pmo (and an
        // insert's increments must not overflow them).
        if self.height > MAX_HEIGHT
            || (self.root == 0) != (self.nodes == 0)
            || self.nodes >= 1 << 58
            || self.len > self.nodes * B as u64
        {
            return Err(TypedError::Corrupt("B-tree header"));
        }
        Ok(())
    }

    /// The node count after freeing one node; an error if the header recorded fewer nodes
    /// than the tree has (altered outside pmo).
    fn fewer_nodes(&self) -> Result<u64> {
        self.nodes
            .checked_sub(1)
            .ok_or_else(|| TypedError::Corrupt("B-tree has more nodes than recorded"))
    }

    /// Visit every node (depth first), each once; bounded by the node count.
    fn walk(&self, h: &Ctx, f: &mut NodeVisitor<'_, K, V>) -> Result<()> {
        self.check(h)?;
        if self.root == 0 {
            return Ok(());
        }
        let mut budget = self.nodes;
        let mut stack = vec![(self.root, self.height)];
        while let Some((off, level)) = stack.pop() {
            budget = budget
                .checked_sub(1)
                .ok_or_else(|| TypedError::Corrupt("B-tree has more nodes than recorded"))?;
            let node = Node::<K, V>::at(h, off, level == 0)?;
            if level > 0 {
                for i in 0..=node.n() {
                    stack.push((node.kid(i), level - 1));
                }
            }
            f(&node, h)?;
        }
        Ok(())
    }

    /// The leaf that holds (or would hold) `k`.
    #[inline]
    fn leaf_for(&self, h: &Ctx, k: &K) -> Result<Option<Node<K, V>>> {
        self.check(h)?;
        if self.root == 0 {
            return Ok(None);
        }
        let mut off = self.root;
        for level in (1..=self.height).rev() {
            let node = Node::<K, V>::at(h, off, false)?;
            let _ = level;
            let i = node.keys_slice().partition_point(|x| x <= k);
            off = node.kid(i);
        }
        Ok(Some(Node::at(h, off, true)?))
    }

    /// The leftmost leaf.
    fn first_leaf(&self, h: &Ctx) -> Result<Option<Node<K, V>>> {
        self.check(h)?;
        if self.root == 0 {
            return Ok(None);
        }
        let mut off = self.root;
        for _ in 0..self.height {
            off = Node::<K, V>::at(h, off, false)?.kid(0);
        }
        Ok(Some(Node::at(h, off, true)?))
    }

    /// The value for `k`.
    #[inline]
    pub fn get<'a>(&'a self, h: &'a Ctx, k: &K) -> Result<Option<&'a V>> {
        let Some(leaf) = self.leaf_for(h, k)? else {
            return Ok(None);
        };
        let keys = leaf.keys_slice();
        let i = keys.partition_point(|x| x < k);
        if i < keys.len() && keys[i] == *k {
            // SAFETY: `i < n`: a value of the owned leaf; shared borrow of the map for 'a.
            return Ok(Some(unsafe { &*leaf.vals().add(i) }));
        }
        Ok(None)
    }

    /// True if `k` is present.
    pub fn contains_key(&self, h: &Ctx, k: &K) -> Result<bool> {
        Ok(self.get(h, k)?.is_some())
    }

    /// The value for `k`, mutably.
    #[inline]
    pub fn get_mut<'a>(&'a mut self, h: &'a Ctx, k: &K) -> Result<Option<&'a mut V>> {
        h.writable()?;
        let Some(leaf) = self.leaf_for(h, k)? else {
            return Ok(None);
        };
        let keys = leaf.keys_slice();
        let i = keys.partition_point(|x| x < k);
        if i < keys.len() && keys[i] == *k {
            // SAFETY: `i < n`: a value of the owned leaf; exclusive borrow for 'a; read-write.
            let v = unsafe { &mut *leaf.vals().add(i) };
            h.touch_val(v)?;
            return Ok(Some(v));
        }
        Ok(None)
    }

    /// Split the full child `i` of `parent` (an inner node with room for one more key).
    fn split_child(
        &mut self,
        h: &Ctx,
        parent: &Node<K, V>,
        i: usize,
        child_leaf: bool,
    ) -> Result<()> {
        let child = Node::<K, V>::at(h, parent.kid(i), child_leaf)?;
        if child.n() != B {
            return Err(TypedError::Corrupt(
                "B-tree split of a node that is not full",
            ));
        }
        let right = Node::<K, V>::alloc(h, child_leaf)?;
        self.nodes += 1;
        let mid = B / 2;
        let sep;
        // SAFETY: all indices stay below B (keys, values) or B + 1 (children) of blocks this
        // map owns: child and parent resolved and checked, right freshly allocated. Moves are
        // bitwise; each value ends up in exactly one slot.
        unsafe {
            if child_leaf {
                let m = B - mid;
                std::ptr::copy_nonoverlapping(child.keys().add(mid), right.keys(), m);
                std::ptr::copy_nonoverlapping(child.vals().add(mid), right.vals(), m);
                h.rebind_moved(right.vals(), m)?;
                right.set_n(m);
                child.set_n(mid);
                right.set_next(child.next());
                child.set_next(right.off);
                sep = right.key(0);
            } else {
                sep = child.key(mid);
                let m = B - mid - 1;
                std::ptr::copy_nonoverlapping(child.keys().add(mid + 1), right.keys(), m);
                std::ptr::copy_nonoverlapping(child.kids().add(mid + 1), right.kids(), m + 1);
                right.set_n(m);
                child.set_n(mid);
            }
            let pn = parent.n();
            std::ptr::copy(parent.keys().add(i), parent.keys().add(i + 1), pn - i);
            std::ptr::copy(parent.kids().add(i + 1), parent.kids().add(i + 2), pn - i);
            parent.keys().add(i).write(sep);
            parent.kids().add(i + 1).write(right.off);
            parent.set_n(pn + 1);
        }
        child.touch(h)?;
        right.touch(h)?;
        parent.touch(h)
    }

    /// Insert or replace: returns true if `k` was present (its old value's blocks are freed).
    pub fn insert(&mut self, h: &Ctx, k: K, v: V) -> Result<bool> {
        #[allow(clippy::let_unit_value)]
        let () = <Self as Persistent>::LAYOUT_OK;
        self.check(h)?;
        h.writable()?;
        if self.root == 0 {
            let leaf = Node::<K, V>::alloc(h, true)?;
            self.root = leaf.off;
            self.height = 0;
            self.nodes = 1;
            self.heap = h.heap_id();
            self.home = h.home_of(self)?;
        } else if Node::<K, V>::at(h, self.root, self.height == 0)?.n() == B {
            if self.height >= MAX_HEIGHT {
                return Err(TypedError::CapacityOverflow);
            }
            let new_root = Node::<K, V>::alloc(h, false)?;
            self.nodes += 1;
            // SAFETY: child 0 of a fresh inner node we own.
            unsafe { new_root.kids().write(self.root) };
            if let Err(e) = self.split_child(h, &new_root, 0, self.height == 0) {
                // The split allocates before it changes anything: undo the new root, so a
                // failed insert (out of space) leaves the map as it was, with nothing leaked.
                h.free(new_root.off)?;
                self.nodes = self.fewer_nodes()?;
                return Err(e);
            }
            self.root = new_root.off;
            self.height += 1;
        }
        h.touch_val(self)?;
        let mut node = Node::<K, V>::at(h, self.root, self.height == 0)?;
        for level in (1..=self.height).rev() {
            let mut i = node.keys_slice().partition_point(|x| *x <= k);
            let child_leaf = level == 1;
            if Node::<K, V>::at(h, node.kid(i), child_leaf)?.n() == B {
                self.split_child(h, &node, i, child_leaf)?;
                if k >= node.key(i) {
                    i += 1;
                }
            }
            node = Node::at(h, node.kid(i), child_leaf)?;
        }
        let n = node.n();
        let i = node.keys_slice().partition_point(|x| *x < k);
        // SAFETY: `i <= n < B` (the leaf is not full: split on the way down); slots of a leaf
        // this map owns; exclusive borrow; read-write attach.
        unsafe {
            if i < n && node.key(i) == k {
                let slot = node.vals().add(i);
                (*slot).release(h)?;
                slot.write(v);
                h.touch(slot.cast(), std::mem::size_of::<V>())?;
                return Ok(true);
            }
            if n >= B {
                return Err(TypedError::Corrupt("B-tree leaf full after split"));
            }
            std::ptr::copy(node.keys().add(i), node.keys().add(i + 1), n - i);
            std::ptr::copy(node.vals().add(i), node.vals().add(i + 1), n - i);
            node.keys().add(i).write(k);
            node.vals().add(i).write(v);
            h.rebind_moved(node.vals().add(i + 1), n - i)?;
            node.set_n(n + 1);
        }
        self.len += 1;
        h.touch_many(&[
            node.range(),
            ((self as *const Self).cast(), std::mem::size_of::<Self>()),
        ])?;
        Ok(false)
    }

    /// Remove `k` (freeing what its value owns): true if it was present. Nodes left empty are
    /// freed; a map that runs empty frees all its nodes.
    pub fn remove(&mut self, h: &Ctx, k: &K) -> Result<bool> {
        h.writable()?;
        self.check(h)?;
        if self.root == 0 {
            return Ok(false);
        }
        // The path from the root: (inner node, child index taken).
        let mut path: Vec<(Node<K, V>, usize)> = Vec::with_capacity(self.height as usize);
        let mut off = self.root;
        for _ in 0..self.height {
            let node = Node::<K, V>::at(h, off, false)?;
            let i = node.keys_slice().partition_point(|x| x <= k);
            off = node.kid(i);
            path.push((node, i));
        }
        let leaf = Node::<K, V>::at(h, off, true)?;
        let n = leaf.n();
        let i = leaf.keys_slice().partition_point(|x| x < k);
        if i >= n || leaf.key(i) != *k {
            return Ok(false);
        }
        let len = self
            .len
            .checked_sub(1)
            .ok_or_else(|| TypedError::Corrupt("B-tree has more entries than recorded"))?;
        // SAFETY: `i < n <= B`: slots of a leaf this map owns; exclusive borrow; read-write.
        unsafe {
            (*leaf.vals().add(i)).release(h)?;
            std::ptr::copy(leaf.keys().add(i + 1), leaf.keys().add(i), n - i - 1);
            std::ptr::copy(leaf.vals().add(i + 1), leaf.vals().add(i), n - i - 1);
            leaf.set_n(n - 1);
            h.rebind_moved(leaf.vals().add(i), n - i - 1)?;
        }
        self.len = len;
        h.touch_many(&[
            leaf.range(),
            ((self as *const Self).cast(), std::mem::size_of::<Self>()),
        ])?;
        if self.len == 0 {
            self.clear(h)?;
        } else if n == 1 {
            // Only a tree written before merging existed has an empty leaf besides the root.
            self.unlink_empty_leaf(h, leaf, path)?;
        } else {
            self.rebalance(h, leaf, path)?;
        }
        Ok(true)
    }

    /// After a removal from `node` (a leaf; `path` leads to it): while a node other than the
    /// root has fewer than `MIN` keys, refill it from a sibling or merge the two; then let a
    /// root without a key give way to its only child.
    fn rebalance(
        &mut self,
        h: &Ctx,
        mut node: Node<K, V>,
        mut path: Vec<(Node<K, V>, usize)>,
    ) -> Result<()> {
        let mut leaf = true;
        while let Some((parent, i)) = path.pop() {
            if node.n() >= MIN {
                break;
            }
            let pn = parent.n();
            if pn > 0 {
                // The node and its left sibling, or its right one for the first child.
                let li = if i > 0 { i - 1 } else { 0 };
                let left = Node::<K, V>::at(h, parent.kid(li), leaf)?;
                let right = Node::<K, V>::at(h, parent.kid(li + 1), leaf)?;
                let (ln, rn) = (left.n(), right.n());
                let fits = if leaf { ln + rn <= B } else { ln + rn < B };
                if fits {
                    Self::merge(h, &parent, li, &left, &right, leaf)?;
                    h.free(right.off)?;
                    self.nodes = self.fewer_nodes()?;
                } else if i == li {
                    Self::take_first_of_right(h, &parent, li, &left, &right, leaf)?;
                } else {
                    Self::take_last_of_left(h, &parent, li, &left, &right, leaf)?;
                }
                left.touch(h)?;
                if !fits {
                    right.touch(h)?;
                }
                parent.touch(h)?;
                if !fits {
                    break; // the parent keeps its number of keys
                }
            }
            // (A parent without a key, from a tree written before merging: no sibling here;
            // the parent is rebalanced at the level above.)
            node = parent;
            leaf = false;
        }
        while self.height > 0 {
            let root = Node::<K, V>::at(h, self.root, false)?;
            if root.n() > 0 {
                break;
            }
            let child = root.kid(0);
            h.free(root.off)?;
            self.nodes = self.fewer_nodes()?;
            self.root = child;
            self.height -= 1;
        }
        h.touch_val(self)
    }

    /// Move everything of `right` (child `li + 1` of `parent`) to the end of `left` (child
    /// `li`; the caller checked that it fits) and drop separator `li` and child `li + 1` from
    /// `parent`. The caller frees `right`.
    fn merge(
        h: &Ctx,
        parent: &Node<K, V>,
        li: usize,
        left: &Node<K, V>,
        right: &Node<K, V>,
        leaf: bool,
    ) -> Result<()> {
        let (ln, rn, pn) = (left.n(), right.n(), parent.n());
        if li >= pn || ln + rn + usize::from(!leaf) > B {
            return Err(TypedError::Corrupt("B-tree merge does not fit"));
        }
        // SAFETY: indices below B (keys, values) or B + 1 (children) of three distinct nodes
        // this map owns (checked when resolved; `ln + rn (+ 1) <= B`, `li < pn <= B`); bitwise
        // moves, each value ends up in exactly one live slot (`right` is freed unread).
        unsafe {
            if leaf {
                std::ptr::copy_nonoverlapping(right.keys(), left.keys().add(ln), rn);
                std::ptr::copy_nonoverlapping(right.vals(), left.vals().add(ln), rn);
                left.set_n(ln + rn);
                left.set_next(right.next());
                h.rebind_moved(left.vals().add(ln), rn)?;
            } else {
                left.keys().add(ln).write(parent.key(li));
                std::ptr::copy_nonoverlapping(right.keys(), left.keys().add(ln + 1), rn);
                std::ptr::copy_nonoverlapping(right.kids(), left.kids().add(ln + 1), rn + 1);
                left.set_n(ln + rn + 1);
            }
            std::ptr::copy(
                parent.keys().add(li + 1),
                parent.keys().add(li),
                pn - li - 1,
            );
            std::ptr::copy(
                parent.kids().add(li + 2),
                parent.kids().add(li + 1),
                pn - li - 1,
            );
            parent.set_n(pn - 1);
        }
        Ok(())
    }

    /// `left` (child `li`) takes the first entry of `right` (child `li + 1`, which has more
    /// than one) through separator `li`.
    fn take_first_of_right(
        h: &Ctx,
        parent: &Node<K, V>,
        li: usize,
        left: &Node<K, V>,
        right: &Node<K, V>,
        leaf: bool,
    ) -> Result<()> {
        let (ln, rn) = (left.n(), right.n());
        debug_assert!(ln < B && rn > 1);
        // SAFETY: `ln < B` (the pair did not fit in one node, so `left` is not full) and
        // `rn >= 1`: slots inside nodes this map owns; the moved value leaves `right`.
        unsafe {
            if leaf {
                left.keys().add(ln).write(right.key(0));
                std::ptr::copy_nonoverlapping(right.vals(), left.vals().add(ln), 1);
                std::ptr::copy(right.keys().add(1), right.keys(), rn - 1);
                std::ptr::copy(right.vals().add(1), right.vals(), rn - 1);
                parent.keys().add(li).write(right.key(0));
                h.rebind_moved(left.vals().add(ln), 1)?;
                h.rebind_moved(right.vals(), rn - 1)?;
            } else {
                left.keys().add(ln).write(parent.key(li));
                left.kids().add(ln + 1).write(right.kid(0));
                parent.keys().add(li).write(right.key(0));
                std::ptr::copy(right.keys().add(1), right.keys(), rn - 1);
                std::ptr::copy(right.kids().add(1), right.kids(), rn);
            }
            left.set_n(ln + 1);
            right.set_n(rn - 1);
        }
        Ok(())
    }

    /// `right` (child `li + 1`) takes the last entry of `left` (child `li`, which has more
    /// than one) through separator `li`.
    fn take_last_of_left(
        h: &Ctx,
        parent: &Node<K, V>,
        li: usize,
        left: &Node<K, V>,
        right: &Node<K, V>,
        leaf: bool,
    ) -> Result<()> {
        let (ln, rn) = (left.n(), right.n());
        debug_assert!(rn < B && ln > 1);
        // SAFETY: `rn < B` (the pair did not fit in one node) and `ln >= 1`: slots inside
        // nodes this map owns; the moved value leaves `left`.
        unsafe {
            if leaf {
                std::ptr::copy(right.keys(), right.keys().add(1), rn);
                std::ptr::copy(right.vals(), right.vals().add(1), rn);
                right.keys().write(left.key(ln - 1));
                std::ptr::copy_nonoverlapping(left.vals().add(ln - 1), right.vals(), 1);
                parent.keys().add(li).write(right.key(0));
                h.rebind_moved(right.vals(), rn + 1)?;
            } else {
                std::ptr::copy(right.keys(), right.keys().add(1), rn);
                std::ptr::copy(right.kids(), right.kids().add(1), rn + 1);
                right.keys().write(parent.key(li));
                right.kids().write(left.kid(ln));
                parent.keys().add(li).write(left.key(ln - 1));
            }
            left.set_n(ln - 1);
            right.set_n(rn + 1);
        }
        Ok(())
    }

    /// Free an empty leaf (not the root: the map is not empty): splice it out of the leaf
    /// chain, remove it from its parent, cascade up through inner nodes left childless, and
    /// let a root with a single child give way to it.
    fn unlink_empty_leaf(
        &mut self,
        h: &Ctx,
        leaf: Node<K, V>,
        mut path: Vec<(Node<K, V>, usize)>,
    ) -> Result<()> {
        // The previous leaf: below the nearest ancestor where we went right of child 0, the
        // rightmost leaf of the subtree to the left.
        if let Some(d) = path.iter().rposition(|(_, i)| *i > 0) {
            let (anc, i) = &path[d];
            let mut off = anc.kid(i - 1);
            // Levels below that subtree's root down to the leaves.
            for _ in 0..path.len() - d - 1 {
                let node = Node::<K, V>::at(h, off, false)?;
                off = node.kid(node.n());
            }
            let prev = Node::<K, V>::at(h, off, true)?;
            prev.set_next(leaf.next());
            prev.touch(h)?;
        }
        let mut dead = leaf.off;
        while let Some((parent, i)) = path.pop() {
            h.free(dead)?;
            self.nodes = self.fewer_nodes()?;
            let pn = parent.n();
            if pn == 0 {
                // The parent's only child is gone: it is empty too.
                dead = parent.off;
                continue;
            }
            let key_at = if i > 0 { i - 1 } else { 0 };
            // SAFETY: `key_at < pn <= B` and `i <= pn`: slots of an inner node this map owns.
            unsafe {
                std::ptr::copy(
                    parent.keys().add(key_at + 1),
                    parent.keys().add(key_at),
                    pn - key_at - 1,
                );
                std::ptr::copy(parent.kids().add(i + 1), parent.kids().add(i), pn - i);
            }
            parent.set_n(pn - 1);
            parent.touch(h)?;
            dead = 0;
            break;
        }
        if dead != 0 {
            return Err(TypedError::Corrupt("B-tree emptied a non-empty map"));
        }
        // A root with one child and no key gives way to the child.
        while self.height > 0 {
            let root = Node::<K, V>::at(h, self.root, false)?;
            if root.n() > 0 {
                break;
            }
            let child = root.kid(0);
            h.free(root.off)?;
            self.nodes = self.fewer_nodes()?;
            self.root = child;
            self.height -= 1;
        }
        h.touch_val(self)
    }

    /// Remove every entry and free every node.
    pub fn clear(&mut self, h: &Ctx) -> Result<()> {
        h.writable()?;
        let mut nodes = Vec::new();
        self.walk(h, &mut |node, h| {
            if V::OWNS_BLOCKS && node.is_leaf() {
                for i in 0..node.n() {
                    // SAFETY: `i < n`: a value of a leaf this map owns; exclusive borrow.
                    unsafe { &mut *node.vals().add(i) }.release(h)?;
                }
            }
            nodes.push(node.off);
            Ok(())
        })?;
        for off in nodes {
            h.free(off)?;
        }
        *self = PBTreeMap::default();
        h.touch_val(self)
    }

    /// The entries with keys in `range`, in key order.
    pub fn range<'a, R: RangeBounds<K>>(&'a self, h: &'a Ctx, range: R) -> Result<Range<'a, K, V>> {
        let start = range.start_bound().cloned();
        let leaf = match start {
            Bound::Unbounded => self.first_leaf(h)?,
            Bound::Included(s) | Bound::Excluded(s) => self.leaf_for(h, &s)?,
        };
        let pos = match (&leaf, start) {
            (Some(l), Bound::Included(s)) => l.keys_slice().partition_point(|x| *x < s),
            (Some(l), Bound::Excluded(s)) => l.keys_slice().partition_point(|x| *x <= s),
            _ => 0,
        };
        Ok(Range {
            h,
            leaf,
            pos,
            end: range.end_bound().cloned(),
            budget: self.nodes,
            _m: PhantomData,
        })
    }

    /// Every entry in key order.
    pub fn iter<'a>(&'a self, h: &'a Ctx) -> Result<Range<'a, K, V>> {
        self.range(h, ..)
    }
}

/// Iterator over a key range of a [`PBTreeMap`]. Items are `Err(Corrupt)` if a leaf link is
/// damaged (then iteration ends).
pub struct Range<'a, K, V> {
    h: &'a Ctx,
    leaf: Option<Node<K, V>>,
    pos: usize,
    end: Bound<K>,
    budget: u64,
    _m: PhantomData<&'a (K, V)>,
}

impl<'a, K: Persistent + Copy + Ord, V: Persistent> Iterator for Range<'a, K, V> {
    type Item = Result<(&'a K, &'a V)>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let leaf = self.leaf.as_ref()?;
            if self.pos < leaf.n() {
                let i = self.pos;
                // SAFETY: `i < n <= B`: a key and value of a leaf the map (borrowed shared for
                // 'a) owns.
                let (k, v) = unsafe { (&*leaf.keys().add(i), &*leaf.vals().add(i)) };
                let inside = match &self.end {
                    Bound::Unbounded => true,
                    Bound::Included(e) => k <= e,
                    Bound::Excluded(e) => k < e,
                };
                if !inside {
                    self.leaf = None;
                    return None;
                }
                self.pos += 1;
                return Some(Ok((k, v)));
            }
            let next = leaf.next();
            if next == 0 {
                self.leaf = None;
                return None;
            }
            self.budget = match self.budget.checked_sub(1) {
                Some(b) => b,
                None => {
                    self.leaf = None;
                    return Some(Err(TypedError::Corrupt("B-tree leaf chain loops")));
                }
            };
            match Node::at(self.h, next, true) {
                Ok(n) => {
                    self.leaf = Some(n);
                    self.pos = 0;
                }
                Err(e) => {
                    self.leaf = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TypedHeap;
    use pmo_store::{KdfParams, Pool, PoolOptions};
    use rand::{Rng, SeedableRng};

    type Map = PBTreeMap<u64, u64>;

    /// Walk the tree checking its invariants: keys in order and inside their separators'
    /// bounds, every node but the root holding at least `MIN` keys, the recorded entry and
    /// node counts, and the leaf chain visiting every leaf left to right.
    fn validate(m: &Map, h: &Ctx) -> Vec<(u64, u64)> {
        fn node(
            h: &Ctx,
            off: u64,
            level: u64,
            root: bool,
            (lo, hi): (Option<u64>, Option<u64>),
            leaves: &mut Vec<u64>,
            entries: &mut Vec<(u64, u64)>,
        ) -> u64 {
            let n = Node::<u64, u64>::at(h, off, level == 0).unwrap();
            let keys = n.keys_slice();
            assert!(
                root || keys.len() >= MIN,
                "underfull node: {} keys",
                keys.len()
            );
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys out of order");
            assert!(keys.iter().all(|k| lo.is_none_or(|lo| *k >= lo)));
            assert!(keys.iter().all(|k| hi.is_none_or(|hi| *k < hi)));
            if level == 0 {
                leaves.push(off);
                for (i, k) in keys.iter().enumerate() {
                    // SAFETY (test): a value of a leaf of the map, shared borrow.
                    entries.push((*k, unsafe { *n.vals().add(i) }));
                }
                return 1;
            }
            let mut count = 1;
            for i in 0..=keys.len() {
                let l = if i == 0 { lo } else { Some(keys[i - 1]) };
                let r = if i == keys.len() { hi } else { Some(keys[i]) };
                count += node(h, n.kid(i), level - 1, false, (l, r), leaves, entries);
            }
            count
        }
        let (mut leaves, mut entries) = (Vec::new(), Vec::new());
        if m.root != 0 {
            let count = node(
                h,
                m.root,
                m.height,
                true,
                (None, None),
                &mut leaves,
                &mut entries,
            );
            assert_eq!(count, m.nodes, "recorded node count");
            let mut chain = Vec::new();
            let mut off = leaves[0];
            while off != 0 {
                chain.push(off);
                off = Node::<u64, u64>::at(h, off, true).unwrap().next();
            }
            assert_eq!(chain, leaves, "leaf chain");
        }
        assert_eq!(entries.len() as u64, m.len, "recorded length");
        entries
    }

    fn heap(tag: &str) -> (std::path::PathBuf, Pool) {
        let path = std::env::temp_dir().join(format!(
            "pmo-typed-pbtree-{tag}-{}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let opts = PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..Default::default()
        };
        let pool = Pool::create(&path, 48 << 20, &opts).unwrap();
        (path, pool)
    }

    #[test]
    fn removals_merge_and_refill_nodes_and_keep_the_tree_valid() {
        let (path, pool) = heap("rebalance");
        let mut th = TypedHeap::create(&pool, "t", 4 << 20, b"k").unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let (m, h) = th.root::<Map>().unwrap();
        let mut model = std::collections::BTreeMap::new();
        // Random inserts and removes over a small key space (many splits, merges, refills).
        for step in 0..30_000u64 {
            let k = rng.gen_range(0..3000u64);
            if rng.gen_bool(0.55) {
                assert_eq!(
                    m.insert(h, k, step).unwrap(),
                    model.insert(k, step).is_some()
                );
            } else {
                assert_eq!(m.remove(h, &k).unwrap(), model.remove(&k).is_some());
            }
            if step % 1000 == 999 {
                assert_eq!(
                    validate(m, h),
                    model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
                );
            }
        }
        // Down to empty in three orders, checking as it shrinks: a sparse pattern (3 of 4
        // keys), then from the top, then the rest at random.
        let keys: Vec<u64> = model.keys().copied().collect();
        let mut rest: Vec<u64> = keys.iter().copied().filter(|k| k % 4 == 0).collect();
        for (i, k) in keys.iter().filter(|k| *k % 4 != 0).enumerate() {
            assert!(m.remove(h, k).unwrap());
            model.remove(k);
            if i % 97 == 0 {
                validate(m, h);
            }
        }
        assert_eq!(validate(m, h).len(), model.len());
        // Nodes at least MIN full: at most len / MIN leaves (+ the inner levels).
        assert!(
            m.nodes as usize <= model.len() / MIN + 1 + model.len() / (MIN * MIN) + 2,
            "{} nodes for {} keys",
            m.nodes,
            model.len()
        );
        use rand::seq::SliceRandom;
        let half = rest.len() / 2;
        rest[half..].shuffle(&mut rng);
        for (i, k) in rest.iter().rev().enumerate() {
            assert!(m.remove(h, k).unwrap());
            model.remove(k);
            if i % 31 == 0 {
                assert_eq!(
                    validate(m, h),
                    model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
                );
            }
        }
        assert_eq!((m.len, m.nodes, m.root), (0, 0, 0));
        let c = th.check::<Map>().unwrap();
        assert!(c.unreachable.is_empty());
        th.detach().unwrap();
        drop(pool);
        let _ = std::fs::remove_file(path);
    }
}
