//! The process-wide pool of prediction workers (issue 16, third pass).
//!
//! Before it, every attachment that predicted spawned its own worker threads and joined them at
//! detach: about 80-120 µs per attach + detach on this machine (`std::thread` spawn + join,
//! loaded), more than a short session's faults cost in all. Filebench opens a file (an attach)
//! per operation and reads a few pages of it, so prediction made it slower (0.38-0.79x of no
//! prediction). Now the workers are spawned once per process, as many as the largest
//! [`PredictConfig::workers`](super::PredictConfig::workers) asked for so far (at most
//! [`MAX_WORKERS`](super::MAX_WORKERS)), and serve every predicting attachment: an attach
//! registers a [`Job`] (its hook, view and worker source), a detach removes it.
//!
//! Owns: the job list and the worker threads. Callers: [`super::Predictor`] only.
//!
//! Invariants:
//! - A worker touches a job's view and source only while it holds the job list's read lock;
//!   [`unregister`] takes the write lock to remove the job, so once it returns no worker is
//!   installing into that view and no worker holds a reference to it (the attachment then
//!   unmaps the view: no install reaches an unmapped range, and the plaintext's only mapping
//!   goes with the detach, as before).
//! - A worker serves at most [`REQUESTS_PER_TURN`] requests of one job before it looks at the
//!   next, and each request is bounded (see `install_pages`), so a detach waits at most for one
//!   request of another attachment.
//! - The fault path never takes the lock: it pushes into the hook's ring and unparks a worker,
//!   as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use pmo_os::view::{PageSource, View, PAGE_SIZE};

use super::{install_pages, PredictHook, IDLE_PARK, MAX_WORKERS};
use crate::error::{Result, StoreError};

/// Requests of one job a worker serves before it turns to the next job.
const REQUESTS_PER_TURN: usize = 4;

/// One predicting attachment, as the workers see it.
struct Job {
    id: u64,
    hook: Arc<PredictHook>,
    view: Arc<View>,
    /// The view's source without the hook (a worker's fill is not a fault).
    source: Arc<dyn PageSource>,
}

struct WorkerPool {
    jobs: RwLock<Vec<Job>>,
    /// Handles of the workers spawned so far (index = worker index).
    threads: Mutex<Vec<Thread>>,
    next_id: AtomicU64,
}

fn pool() -> &'static WorkerPool {
    static POOL: OnceLock<WorkerPool> = OnceLock::new();
    POOL.get_or_init(|| WorkerPool {
        jobs: RwLock::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
        next_id: AtomicU64::new(1),
    })
}

/// Register a job served by the first `workers` workers (spawned now if the pool has fewer).
/// Returns the job's id (for [`unregister`]) and those workers' handles (for the hook's
/// wake-ups).
pub(super) fn register(
    hook: Arc<PredictHook>,
    view: Arc<View>,
    source: Arc<dyn PageSource>,
    workers: usize,
) -> Result<(u64, Box<[Thread]>)> {
    let p = pool();
    let workers = workers.clamp(1, MAX_WORKERS);
    let handles: Box<[Thread]> = {
        let mut threads = p.threads.lock().unwrap_or_else(|e| e.into_inner());
        while threads.len() < workers {
            let index = threads.len();
            let spawned = std::thread::Builder::new()
                .name(format!("pmo-predict-{index}"))
                .spawn(move || worker(index));
            match spawned {
                Ok(t) => threads.push(t.thread().clone()),
                Err(e) => return Err(StoreError::Os(format!("spawn prediction worker: {e}"))),
            }
        }
        threads[..workers].iter().cloned().collect()
    };
    let id = p.next_id.fetch_add(1, Ordering::Relaxed);
    p.jobs.write().unwrap_or_else(|e| e.into_inner()).push(Job {
        id,
        hook,
        view,
        source,
    });
    Ok((id, handles))
}

/// Remove job `id`. When this returns, no worker uses the job's view or source any more and
/// the pool holds no reference to them.
pub(super) fn unregister(id: u64) {
    let removed = {
        let mut jobs = pool().jobs.write().unwrap_or_else(|e| e.into_inner());
        jobs.iter()
            .position(|j| j.id == id)
            .map(|i| jobs.swap_remove(i))
    };
    // The job's references (view, source, hook) are released here, outside the lock.
    drop(removed);
}

/// Worker `index`: serve every job's requests in turn; park when none has any.
fn worker(index: usize) {
    let mut buf = Box::new([0u8; PAGE_SIZE]);
    let mut idle_since: Option<Instant> = None;
    loop {
        let mut served = false;
        let mut spin_us = 0u32;
        {
            let jobs = pool().jobs.read().unwrap_or_else(|e| e.into_inner());
            for job in jobs.iter() {
                let hook = &job.hook;
                if hook.stop.load(Ordering::SeqCst) {
                    continue;
                }
                spin_us = spin_us.max(hook.cfg.idle_spin_us);
                let Some(mine) = hook.in_flight.get(index) else {
                    continue;
                };
                for _ in 0..REQUESTS_PER_TURN {
                    let Some(req) = hook.ring.pop() else {
                        break;
                    };
                    install_pages(hook, &job.view, &*job.source, &req, mine, &mut buf);
                    served = true;
                }
            }
        }
        if served {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < Duration::from_micros(u64::from(spin_us)) {
            std::thread::yield_now();
        } else {
            // A wake-up sent since the sweep makes this return at once (the park token).
            std::thread::park_timeout(IDLE_PARK);
            idle_since = None;
        }
    }
}
