//! Filebench's event generator (`eventgen rate=N`) and the two flowops that count:
//! `opslimit` and `finishoncount`, with Filebench's semantics (`flowop_library.c`):
//!
//! - the generator adds `rate` events per second to a shared queue, and stops adding while the
//!   queue holds five seconds' worth; the queue starts empty when the run starts;
//! - `opslimit [target=F]` does nothing without a generator (or with rate 0). With one, it
//!   watches a count (flowop `F`'s operations in this thread, else every I/O flowop's of the
//!   workload): the first time it notes the count; later it takes from the queue as many events
//!   as operations happened since, waiting until the queue has them. So the watched operations
//!   run at most at the generator's rate;
//! - `iopslimit [target=F]` is `opslimit` watching read and write operations only (without a
//!   target, the workload's `fs_rcount + fs_wcount`); `bwlimit [target=F]` watches bytes and
//!   takes one event per MiB owed (`bytes / MiB + 1`, crediting whole MiBs), so the watched
//!   bytes flow at most at `rate` MiB per second; `eventlimit` takes one event per run;
//! - `finishoncount value=N [target=F]`: once the watched count reaches `N`, the thread has no
//!   more work, which `set mode quit` turns into the end of the run (firstdone), of the thread
//!   (alldone), or, time-based, the end of the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shared event queue of `eventgen rate=N`.
pub struct EventGen {
    rate: f64,
    /// (events queued, when the queue was last filled)
    q: Mutex<(f64, Instant)>,
}

impl EventGen {
    /// A generator of `rate` events per second, its queue empty now; `None` when the rate is
    /// not positive (Filebench's generator stays disabled then).
    pub fn new(rate: Option<f64>) -> Option<EventGen> {
        match rate {
            Some(r) if r > 0.0 && r.is_finite() => Some(EventGen {
                rate: r,
                q: Mutex::new((0.0, Instant::now())),
            }),
            _ => None,
        }
    }

    /// Events per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Take `n` events, waiting for the generator to produce them. Returns false (taking
    /// nothing) if `stop` is set or `deadline` passes first.
    pub fn take(&self, n: u64, stop: &AtomicBool, deadline: Instant) -> bool {
        let n = n as f64;
        loop {
            let wait = {
                let mut g = self.q.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                // Filebench adds only while the queue holds less than five seconds' worth.
                if g.0 < 5.0 * self.rate {
                    g.0 += self.rate * now.duration_since(g.1).as_secs_f64();
                }
                g.1 = now;
                if g.0 >= n {
                    g.0 -= n;
                    return true;
                }
                Duration::from_secs_f64(((n - g.0) / self.rate).min(0.01))
            };
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left <= wait {
                // The events come too late: hold the thread until the run ends.
                std::thread::sleep(left);
                return false;
            }
            std::thread::sleep(wait.max(Duration::from_micros(50)));
        }
    }
}

/// One thread's state of an `opslimit` flowop.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpsLimit {
    /// The watched count when last seen (`None`: never run yet).
    last: Option<u64>,
    /// Events taken minus operations done (negative: operations owe events).
    bucket: i64,
}

impl OpsLimit {
    /// Run once with the watched count at `ops`: wait for the events the operations since the
    /// last time owe (`opslimit`, `iopslimit`: one event per operation).
    pub fn run(&mut self, ops: u64, gen: Option<&EventGen>, stop: &AtomicBool, deadline: Instant) {
        self.run_in(ops, 1, gen, stop, deadline);
    }

    /// Run once with the watched count at `count`, one event paying for `unit` of it
    /// (`bwlimit`: a MiB of bytes). Filebench's rounding: `owed / unit + 1` events when the
    /// unit is larger than one, crediting `events * unit`.
    pub fn run_in(
        &mut self,
        count: u64,
        unit: u64,
        gen: Option<&EventGen>,
        stop: &AtomicBool,
        deadline: Instant,
    ) {
        let Some(gen) = gen else { return };
        let Some(last) = self.last.replace(count) else {
            return;
        };
        self.bucket = self
            .bucket
            .saturating_sub(count.saturating_sub(last).min(i64::MAX as u64) as i64);
        if self.bucket >= 0 {
            return;
        }
        let owed = self.bucket.unsigned_abs();
        let unit = unit.max(1);
        let events = if unit == 1 { owed } else { owed / unit + 1 };
        if gen.take(events, stop, deadline) {
            self.bucket = self
                .bucket
                .saturating_add(events.saturating_mul(unit).min(i64::MAX as u64) as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_generator_no_wait() {
        assert!(EventGen::new(None).is_none());
        assert!(EventGen::new(Some(0.0)).is_none());
        let mut l = OpsLimit::default();
        let stop = AtomicBool::new(false);
        let t = Instant::now();
        for ops in 0..1000 {
            l.run(ops * 10, None, &stop, t + Duration::from_secs(5));
        }
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_first_run_only_notes_the_count() {
        let gen = EventGen::new(Some(1.0)).unwrap();
        let stop = AtomicBool::new(false);
        let mut l = OpsLimit::default();
        let t = Instant::now();
        // 1000 operations before the first opslimit owe nothing.
        l.run(1000, Some(&gen), &stop, t + Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_millis(500));
        assert_eq!(l.bucket, 0);
    }

    #[test]
    fn operations_are_held_to_the_rate() {
        // 400 events/s; 60 operations after the first must wait for 60 events: >= 150 ms
        // from the generator's start (so `t` is taken before it: events it made before `t`
        // would shorten the wait measured from `t`).
        let t = Instant::now();
        let gen = EventGen::new(Some(400.0)).unwrap();
        let stop = AtomicBool::new(false);
        let mut l = OpsLimit::default();
        let deadline = t + Duration::from_secs(10);
        l.run(0, Some(&gen), &stop, deadline);
        for ops in 1..=60 {
            l.run(ops, Some(&gen), &stop, deadline);
        }
        assert!(
            t.elapsed() >= Duration::from_millis(145),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(l.bucket, 0);
    }

    #[test]
    fn bytes_are_held_to_a_mib_per_event() {
        // 20 events/s = 20 MiB/s; 3 MiB after the first run owe 4 events (3 + 1): >= 190 ms,
        // and the extra MiB is credited, so the next 1 MiB costs nothing.
        const MIB: u64 = 1 << 20;
        let t = Instant::now(); // before the generator starts (see above)
        let gen = EventGen::new(Some(20.0)).unwrap();
        let stop = AtomicBool::new(false);
        let mut l = OpsLimit::default();
        let deadline = t + Duration::from_secs(10);
        l.run_in(0, MIB, Some(&gen), &stop, deadline);
        l.run_in(3 * MIB, MIB, Some(&gen), &stop, deadline);
        assert!(
            t.elapsed() >= Duration::from_millis(190),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(l.bucket, MIB as i64);
        let t2 = Instant::now();
        l.run_in(4 * MIB, MIB, Some(&gen), &stop, deadline);
        assert!(t2.elapsed() < Duration::from_secs(1), "{:?}", t2.elapsed());
        assert_eq!(l.bucket, 0);
    }

    #[test]
    fn a_stop_or_the_deadline_ends_the_wait() {
        let gen = EventGen::new(Some(1.0)).unwrap();
        let stop = AtomicBool::new(true);
        let t = Instant::now();
        assert!(!gen.take(100, &stop, t + Duration::from_secs(60)));
        let go = AtomicBool::new(false);
        assert!(!gen.take(100, &go, Instant::now() + Duration::from_millis(30)));
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
