//! The bounded lock-free request ring between the fault path and the workers (Vyukov's MPMC queue).

use std::sync::atomic::{AtomicU64, Ordering};

/// A request cell of the ring (Vyukov's bounded MPMC queue, all fields atomics).
pub(crate) struct Cell {
    pub(crate) seq: AtomicU64,
    pub(crate) page: AtomicU64,
    /// Stride (low 32 bits, two's complement) and page count (high 32 bits).
    pub(crate) shape: AtomicU64,
}

/// Bounded multi-producer multi-consumer ring of requests. Lock-free; `push` fails when full.
pub(crate) struct Ring {
    pub(crate) cells: Box<[Cell]>,
    pub(crate) mask: u64,
    pub(crate) head: AtomicU64,
    pub(crate) tail: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) page: u64,
    pub(crate) stride: i64,
    pub(crate) pages: u32,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Ring {
        debug_assert!(capacity.is_power_of_two());
        Ring {
            cells: (0..capacity as u64)
                .map(|i| Cell {
                    seq: AtomicU64::new(i),
                    page: AtomicU64::new(0),
                    shape: AtomicU64::new(0),
                })
                .collect(),
            mask: capacity as u64 - 1,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }

    /// Allocation-free and lock-free; false when full.
    pub(crate) fn push(&self, r: Request) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let Some(cell) = self.cells.get((pos & self.mask) as usize) else {
                return false;
            };
            let seq = cell.seq.load(Ordering::Acquire);
            if seq == pos {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cell.page.store(r.page, Ordering::Relaxed);
                        let shape = (r.stride as u32 as u64) | u64::from(r.pages) << 32;
                        cell.shape.store(shape, Ordering::Relaxed);
                        cell.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(now) => pos = now,
                }
            } else if seq < pos {
                return false; // full
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Whether a request may be waiting (exact once pushes and pops have settled; see
    /// [`Predictor::start`]).
    pub(crate) fn may_have_requests(&self) -> bool {
        self.tail.load(Ordering::SeqCst) != self.head.load(Ordering::SeqCst)
    }

    pub(crate) fn pop(&self) -> Option<Request> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = self.cells.get((pos & self.mask) as usize)?;
            let seq = cell.seq.load(Ordering::Acquire);
            let ready = pos.wrapping_add(1);
            if seq == ready {
                match self.head.compare_exchange_weak(
                    pos,
                    ready,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let page = cell.page.load(Ordering::Relaxed);
                        let shape = cell.shape.load(Ordering::Relaxed);
                        cell.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(Request {
                            page,
                            stride: i64::from(shape as u32 as i32),
                            pages: (shape >> 32) as u32,
                        });
                    }
                    Err(now) => pos = now,
                }
            } else if seq < ready {
                return None; // empty
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst) == self.tail.load(Ordering::SeqCst)
    }
}
