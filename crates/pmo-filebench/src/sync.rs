//! Filebench's synchronisation flowops across threads and processes (`flowop_library.c`;
//! pmo's "processes" are groups of threads, so one mutex and condition variable stand for
//! Filebench's shared-memory condition variable and System V semaphores):
//!
//! - `block` waits on its flowop's condition variable; `wakeup target=B` broadcasts to every
//!   instance of `B`. As with `pthread_cond_broadcast`, a wakeup that finds nobody waiting is
//!   lost (Filebench's createdelete-swing relies on the order of its two processes).
//! - `semblock value=V,highwater=H` owns two counters, low (starts at 0) and high (starts at
//!   H): it adds V to high, then waits until low holds V and takes it. `sempost value=V,
//!   target=S` adds V to the low counter of every instance of `S`; with `blocking` it first
//!   waits until S's high counter holds V and takes it in the same step (Filebench's
//!   two-operation `semop`), so posters can run at most H ahead of the blocker.
//!
//! Every wait ends when the run does (its stop flag or deadline).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    /// Wakeups so far (`block` waits for this to move).
    gen: u64,
    low: u64,
    high: u64,
}

/// One `block` or `semblock` flowop of one thread.
#[derive(Debug, Default)]
pub struct SyncPoint {
    m: Mutex<State>,
    cv: Condvar,
}

/// How long a waiter sleeps between looks at the run's stop flag and deadline.
const POLL: Duration = Duration::from_millis(20);

impl SyncPoint {
    /// A point whose semaphore's high counter starts at `highwater`.
    pub fn new(highwater: u64) -> SyncPoint {
        SyncPoint {
            m: Mutex::new(State {
                high: highwater,
                ..Default::default()
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait while `blocked` holds and the run goes on; `false` if the run ended first.
    fn wait_while<'a>(
        &'a self,
        mut g: std::sync::MutexGuard<'a, State>,
        blocked: impl Fn(&State) -> bool,
        stop: &AtomicBool,
        deadline: Instant,
    ) -> Option<std::sync::MutexGuard<'a, State>> {
        while blocked(&g) {
            if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                return None;
            }
            g = self
                .cv
                .wait_timeout(g, POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Some(g)
    }

    /// `block`: wait for the next `wakeup`; `false` if the run ended first.
    pub fn block(&self, stop: &AtomicBool, deadline: Instant) -> bool {
        let g = self.lock();
        let gen = g.gen;
        self.wait_while(g, |s| s.gen == gen, stop, deadline)
            .is_some()
    }

    /// `wakeup`: release every thread blocked here now.
    pub fn wake(&self) {
        self.lock().gen += 1;
        self.cv.notify_all();
    }

    /// `semblock value=V`; `false` if the run ended first.
    pub fn sem_block(&self, v: u64, stop: &AtomicBool, deadline: Instant) -> bool {
        let mut g = self.lock();
        // Saturating: a workload's value=1e30 is u64::MAX.
        g.high = g.high.saturating_add(v);
        self.cv.notify_all();
        match self.wait_while(g, |s| s.low < v, stop, deadline) {
            Some(mut g) => {
                g.low -= v;
                true
            }
            None => false,
        }
    }

    /// `sempost value=V[,blocking]` to this point; `false` if the run ended first.
    pub fn sem_post(&self, v: u64, blocking: bool, stop: &AtomicBool, deadline: Instant) -> bool {
        let g = self.lock();
        let Some(mut g) = self.wait_while(g, |s| blocking && s.high < v, stop, deadline) else {
            return false;
        };
        if blocking {
            g.high -= v;
        }
        g.low = g.low.saturating_add(v);
        self.cv.notify_all();
        true
    }

    /// The semaphore's (low, high) counters.
    pub fn counters(&self) -> (u64, u64) {
        let g = self.lock();
        (g.low, g.high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn wakeup_releases_a_blocked_thread_and_a_lost_wakeup_is_lost() {
        let p = Arc::new(SyncPoint::new(0));
        let stop = AtomicBool::new(false);
        // Nobody waits: this wakeup is lost, and a block after it waits for the next one (here:
        // until its deadline).
        p.wake();
        let t0 = Instant::now();
        assert!(!p.block(&stop, t0 + Duration::from_millis(100)));
        assert!(t0.elapsed() >= Duration::from_millis(100));
        // A wakeup releases a blocked thread. Whether the thread blocks yet cannot be seen
        // from here (a wakeup before it would be lost): wake until it is released.
        let q = p.clone();
        let t = std::thread::spawn(move || {
            let stop = AtomicBool::new(false);
            q.block(&stop, far())
        });
        while !t.is_finished() {
            p.wake();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            t.join().unwrap(),
            "released by a wakeup, not by its deadline"
        );
        // The run's end releases a block nobody wakes.
        let t0 = Instant::now();
        assert!(!p.block(&stop, Instant::now() + Duration::from_millis(50)));
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn semaphores_count_and_highwater_bounds_blocking_posters() {
        let stop = AtomicBool::new(false);
        let p = SyncPoint::new(2);
        // Two blocking posts of 1 fit under highwater 2; a third waits (here: until the
        // deadline, since nobody blocks).
        assert!(p.sem_post(1, true, &stop, far()));
        assert!(p.sem_post(1, true, &stop, far()));
        assert_eq!(p.counters(), (2, 0));
        assert!(!p.sem_post(1, true, &stop, Instant::now() + Duration::from_millis(30)));
        assert_eq!(
            p.counters(),
            (2, 0),
            "a blocking post past highwater must wait"
        );
        // semblock 2 returns 2 to high and takes the 2 posted.
        assert!(p.sem_block(2, &stop, far()));
        assert_eq!(p.counters(), (0, 2));
        // A non-blocking post ignores highwater.
        assert!(p.sem_post(5, false, &stop, far()));
        assert_eq!(p.counters(), (5, 2));
    }

    #[test]
    fn huge_values_saturate_the_counters() {
        // value=1e30 in a workload is u64::MAX here: the counters stop there, no overflow.
        let stop = AtomicBool::new(false);
        let p = SyncPoint::new(u64::MAX);
        assert!(p.sem_post(u64::MAX, false, &stop, far()));
        assert!(p.sem_post(u64::MAX, false, &stop, far()));
        assert_eq!(p.counters(), (u64::MAX, u64::MAX));
        assert!(p.sem_block(u64::MAX, &stop, far()));
        assert_eq!(p.counters(), (0, u64::MAX));
    }
}
