//! Nonblocking detach: the part of a detach that works on the medium (today: the checksums of
//! integrity-at-detach schemes) runs on a background worker, which holds the PMO's attach lock
//! until it is done. `detach` returns as soon as the mapping is gone. A later attach of the
//! same PMO, from this or another process, finds the lock taken and the holder word marked
//! "detaching", and waits for it (the paper's *attach stall*, counted as such). An attach
//! asks whether a background detach holds the lock both before and after its first try, so an
//! attach that follows a detach in this process never fails with `Busy`, however the worker's
//! release falls between the two (`handle::Pool::lock_attach_exclusive`).
//!
//! Small PMOs detach inline: waking the worker costs more than the work. On this VM a
//! cross-vCPU wake-up is 19-72 µs, and the next attach of the same PMO waits for the worker
//! (the *attach stall*): a 16 KiB `sp-id` session measured ~180 µs of attach stall per
//! session single-threaded and ~400 µs with 8 threads, against ~14 µs of checksums done
//! inline (`examples/session_bench.rs`; `docs/results.md`, issue 10, "One small session").
//! A PMO of at most [`inline_pages`] pages (default [`INLINE_PAGES`],
//! `PMO_DETACH_INLINE_PAGES` overrides it; 0 sends every detach with work to the worker, as
//! before) finishes its detach in the call.
//!
//! Bounded: at most [`QUEUE_MAX`] detaches wait for the worker; beyond that a detach does its
//! work itself. If the process exits with work queued, nothing is lost: the integrity-pending
//! word is still set and the next attach's crash handler completes the work.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

use pmo_pool::handle::PmoHandle;
use pmo_pool::inflight;
pub use pmo_pool::inflight::{wait_for_background_detaches, DETACH_STALL_MAX};

/// Detaches that may wait for the worker at once.
pub const QUEUE_MAX: usize = 64;

/// PMOs of at most this many pages finish their detach inline (see the module comment). The
/// inline work is at most ~3.5 µs a page (an `sp-id` checksum: read back, decrypt, SHA-256,
/// write), so 16 pages cost ~56 µs, about one cross-vCPU wake-up (19-72 µs here): beyond that
/// the worker is the cheaper choice for the caller. 16 pages is also one fault-around window.
pub const INLINE_PAGES: u64 = 16;

/// The inline-detach limit in pages: `PMO_DETACH_INLINE_PAGES` if set to a number, else
/// [`INLINE_PAGES`]. Read once per process.
pub fn inline_pages() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("PMO_DETACH_INLINE_PAGES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(INLINE_PAGES)
    })
}

struct Worker {
    tx: SyncSender<PmoHandle>,
}

fn worker() -> Option<&'static Worker> {
    static W: OnceLock<Option<Worker>> = OnceLock::new();
    W.get_or_init(|| {
        let (tx, rx) = sync_channel::<PmoHandle>(QUEUE_MAX);
        std::thread::Builder::new()
            .name("pmo-detach".into())
            .spawn(move || {
                for h in rx {
                    let pmo = h.core.uuid;
                    drop(h); // finishes the detach work, then releases the lock
                    inflight::done(pmo);
                }
            })
            .ok()
            .map(|_| Worker { tx })
    })
    .as_ref()
}

/// Finish `h`'s detach in the background if it has work on the medium and the PMO is larger
/// than [`inline_pages`], else now.
pub(crate) fn finish(h: PmoHandle) {
    if !h.has_detach_work() || h.core.npages() <= inline_pages() {
        drop(h);
        return;
    }
    let Some(w) = worker() else {
        drop(h);
        return;
    };
    h.mark_detaching();
    let pmo = h.core.uuid;
    inflight::track(pmo);
    match w.tx.try_send(h) {
        Ok(()) => {}
        Err(TrySendError::Full(h)) | Err(TrySendError::Disconnected(h)) => {
            drop(h);
            inflight::done(pmo);
        }
    }
}
