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
//! - A worker takes a job only under the job list's read lock, and marks it busy (the hook's
//!   `busy` count) before releasing the lock; it unmarks it after dropping its reference to the
//!   job. [`unregister`] sets the hook's stop flag, removes the job under the write lock, then
//!   waits for the job to be idle: when it returns no worker is installing into that view and
//!   the pool holds no reference to it (the attachment then unmaps the view: no install reaches
//!   an unmapped range, and the plaintext's only mapping goes with the detach, as before).
//! - A detach waits only for its own job: a worker that sees the stop flag stops within one
//!   page (see `install_pages`); the list's locks are held for a lookup, never for an install.
//! - A worker serves at most [`REQUESTS_PER_TURN`] requests of one job before it looks at the
//!   next, so several attachments' streams share the workers.
//! - The fault path never takes the lock: it pushes into the hook's ring and unparks a worker,
//!   as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use pmo_os::view::{PageSource, View, PAGE_SIZE};

use super::config::{IDLE_PARK, MAX_WORKERS};
use super::hook::PredictHook;
use super::install::install_pages;
use pmo_meta::error::{Result, StoreError};

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
    jobs: RwLock<Vec<Arc<Job>>>,
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
    p.jobs
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::new(Job {
            id,
            hook,
            view,
            source,
        }));
    Ok((id, handles))
}

/// Remove job `id`, whose hook's stop flag the caller has set. When this returns, no worker
/// uses the job's view or source any more and the pool holds no reference to them.
pub(super) fn unregister(id: u64) {
    let removed = {
        let mut jobs = pool().jobs.write().unwrap_or_else(|e| e.into_inner());
        jobs.iter()
            .position(|j| j.id == id)
            .map(|i| jobs.swap_remove(i))
    };
    if let Some(job) = removed {
        // A worker that took the job before it left the list finishes within one page (the
        // stop flag) and drops its reference before it unmarks the job.
        while job.hook.busy.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

/// Worker `index`: serve the jobs' requests in turn; park when none has any.
fn worker(index: usize) {
    let mut buf = Box::new([0u8; PAGE_SIZE]);
    let mut idle_since: Option<Instant> = None;
    let mut next = 0usize;
    loop {
        let mut spin_us = 0u32;
        let picked = {
            let jobs = pool().jobs.read().unwrap_or_else(|e| e.into_inner());
            let n = jobs.len();
            let mut picked = None;
            for i in 0..n {
                let job = &jobs[(next + i) % n];
                let hook = &job.hook;
                if hook.stop.load(Ordering::SeqCst) {
                    continue;
                }
                spin_us = spin_us.max(hook.cfg.idle_spin_us);
                if let Some(req) = hook.ring.pop() {
                    // Marked before the lock is released (see `unregister`).
                    hook.busy.fetch_add(1, Ordering::SeqCst);
                    picked = Some((Taken::new(job.clone()), req));
                    next = (next + i + 1) % n;
                    break;
                }
            }
            picked
        };
        let Some((taken, first)) = picked else {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() < Duration::from_micros(u64::from(spin_us)) {
                std::thread::yield_now();
            } else {
                // A wake-up sent since the sweep makes this return at once (the park token).
                std::thread::park_timeout(IDLE_PARK);
                idle_since = None;
            }
            continue;
        };
        idle_since = None;
        if let Some((job, hook, mine)) = taken
            .parts()
            .and_then(|(job, hook)| Some((job, hook, hook.in_flight.get(index)?)))
        {
            let mut req = Some(first);
            let mut served = 0;
            while let Some(r) = req {
                install_pages(hook, &job.view, &*job.source, &r, mine, &mut buf);
                served += 1;
                req = if served < REQUESTS_PER_TURN && !hook.stop.load(Ordering::SeqCst) {
                    hook.ring.pop()
                } else {
                    None
                };
            }
        }
        // `taken` drops here: the job's reference first, then the busy mark.
    }
}

/// A job a worker took: unmarks it when dropped (also if an install panicked), after
/// releasing the worker's reference to it, so that [`unregister`] never waits for a worker
/// that is gone and finds no reference left once the job is idle.
struct Taken {
    job: Option<Arc<Job>>,
    hook: Arc<PredictHook>,
}

impl Taken {
    /// `job`, which the caller has just marked busy.
    fn new(job: Arc<Job>) -> Taken {
        Taken {
            hook: job.hook.clone(),
            job: Some(job),
        }
    }

    /// The job and its hook (always `Some` until dropped: `job` is only taken in `drop`).
    fn parts(&self) -> Option<(&Job, &PredictHook)> {
        self.job.as_deref().map(|job| (job, &*self.hook))
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        drop(self.job.take());
        self.hook.busy.fetch_sub(1, Ordering::SeqCst);
    }
}
