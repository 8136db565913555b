//! [`Predictor`]: one attachment's predictor, a job of the shared worker pool (`super::pool`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmo_os::view::{PageSource, View};

use super::config::{PredictConfig, PredictStats};
use super::hook::PredictHook;
use super::pool;
use pmo_meta::error::Result;

/// The worker half: this attachment's job in the process-wide pool of workers
/// (`pool`), which decrypt and install its predicted pages. Dropping it (or [`Predictor::finish`])
/// removes the job; when that returns no worker uses the view any more (the attachment drops
/// it before its view).
pub struct Predictor {
    pub(crate) hook: Arc<PredictHook>,
    /// The pool's id of this job (`None` once removed).
    pub(crate) job: Option<u64>,
}

impl std::fmt::Debug for Predictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Predictor")
            .field("hook", &self.hook)
            .field("job", &self.job)
            .finish()
    }
}

impl Predictor {
    /// Have the pool's workers serve `hook` for `view` (spawning workers the first time, up to
    /// the configured number). `source` fills pages for them: the view's own source *without*
    /// the hook (a worker's fill must not count as a fault).
    pub fn start(
        hook: Arc<PredictHook>,
        view: Arc<View>,
        source: Arc<dyn PageSource>,
    ) -> Result<Predictor> {
        let (job, handles) = pool::register(hook.clone(), view, source, hook.cfg.workers)?;
        // Only `start` sets it, once per hook.
        let _ = hook.workers.set(handles);
        // Requests queued before the handles were published get a worker now. Only then: a
        // wake-up at every attach cost a futex wake and a worker's trip round the job list per
        // short session (issue 16, fourth pass). The fence pairs with the one in `submit`.
        std::sync::atomic::fence(Ordering::SeqCst);
        if hook.ring.may_have_requests() {
            if let Some(workers) = hook.workers.get() {
                for t in workers.iter() {
                    t.unpark();
                }
            }
        }
        Ok(Predictor {
            hook,
            job: Some(job),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> PredictStats {
        self.hook.stats()
    }

    /// The configuration.
    pub fn config(&self) -> PredictConfig {
        self.hook.cfg
    }
}

impl Predictor {
    /// Stop serving this attachment, close every stream's window (as unused), and return the
    /// final counters: nothing changes them after this (what a detach should record).
    pub fn finish(mut self) -> PredictStats {
        self.stop();
        self.hook.stats()
    }

    pub(crate) fn stop(&mut self) {
        let Some(job) = self.job.take() else {
            return;
        };
        // Faults stop notifying, workers stop within a page; then the job leaves the pool (which
        // waits for a worker inside it to let go).
        self.hook.stop.store(true, Ordering::SeqCst);
        pool::unregister(job);
        // Before `close_all` empties the table (a second call finds it empty: no record).
        if let Some(uuid) = self.hook.history_of.get() {
            crate::predict_history::store(*uuid, self.hook.learned());
        }
        self.hook.close_all();
    }
}

impl Drop for Predictor {
    fn drop(&mut self) {
        // Idempotent: after `finish` the job is gone and no window is open.
        self.stop();
    }
}
