//! Parallel page crypto for psync and detach: a fixed worker pool that runs one batch of page
//! jobs split across its threads.
//!
//! Owns a dedicated rayon thread pool of N-1 threads (N = `threads`, default = available cores);
//! a batch is cut into N contiguous chunks, the calling thread does the first and the workers the
//! rest. A batch call returns when every job is done, so the caller's slices are borrowed, never
//! copied.
//!
//! Bounds: each batch is split into at most `threads - 1` pool tasks; at most
//! `max_batches_in_flight` batches use the workers at once, any further caller runs its batch on
//! its own thread instead of queueing, so the pool's queue never holds more than
//! `(threads - 1) * max_batches_in_flight` tasks. Batches whose estimated work (pages x a per-page
//! cost hint) is under `min_parallel_work_ns` also run on the caller: waking an idle vCPU costs
//! tens of microseconds here (shared/measured.md), as much as ~100 pages of AES-GCM but only a
//! dozen pages of XTS + SHA-256.
//!
//! Who calls it: the store's psync (seal dirty pages) and detach/attach of whole-PMO schemes.
//! Not for the fault path (a fault handles one page on the faulting thread).
//!
//! ```
//! use pmo_crypt::{CryptoPool, MasterKey, PmoKeys, PageCtx, PAGE_SIZE};
//! use pmo_crypt::pool::SealJob;
//! let keys = PmoKeys::derive(&MasterKey::from_bytes([1; 32]), [2; 16], [3; 16]).unwrap();
//! let pool = CryptoPool::new(2).unwrap();
//! let plain = vec![[7u8; PAGE_SIZE]; 8];
//! let mut sealed = vec![[0u8; PAGE_SIZE]; 8];
//! let mut jobs: Vec<SealJob> = plain.iter().zip(sealed.iter_mut()).enumerate()
//!     .map(|(i, (p, o))| SealJob::new(PageCtx { pool_uuid: [2; 16], pmo_uuid: [3; 16],
//!         page_index: i as u64, version: 100 + i as u64 }, p, o))
//!     .collect();
//! pool.seal_batch(&keys, &mut jobs).unwrap();
//! assert!(jobs.iter().all(|j| j.tag.is_some()));
//! ```

use crate::error::CryptError;
use crate::faithful::{page_checksum, FaithfulKeys, PageChecksum};
use crate::keys::PmoKeys;
use crate::page::{open_page, seal_page, PageCtx, Tag};
use crate::protect::{PageProtector, PAGE_META_LEN};
use crate::Page;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

// The per-page cost hints belong to the page protections they estimate (`protect`, whose
// `PageProtector::cost_hint_ns` reads them); a batch here weighs its pages with them.
pub use crate::protect::cost_hint_ns;

/// Default smallest batch work, in estimated nanoseconds, worth sending to the workers (see the
/// module doc): about twice the measured cost of waking an idle vCPU.
pub const DEFAULT_MIN_PARALLEL_WORK_NS: u64 = 100_000;

/// Default number of batches that may use the workers at once.
pub const DEFAULT_MAX_BATCHES_IN_FLIGHT: usize = 4;

/// Seal one page: `plaintext` -> `out`, tag written to `tag`.
pub struct SealJob<'a> {
    /// Where the page belongs.
    pub ctx: PageCtx,
    /// The page to seal.
    pub plaintext: &'a Page,
    /// Where its ciphertext goes.
    pub out: &'a mut Page,
    /// Set on success.
    pub tag: Option<Tag>,
}

impl<'a> SealJob<'a> {
    /// A job with no tag yet.
    pub fn new(ctx: PageCtx, plaintext: &'a Page, out: &'a mut Page) -> Self {
        Self {
            ctx,
            plaintext,
            out,
            tag: None,
        }
    }
}

/// Open (verify and decrypt) one page: `sealed` -> `out`.
pub struct OpenJob<'a> {
    /// Where the page belongs.
    pub ctx: PageCtx,
    /// The sealed page.
    pub sealed: &'a Page,
    /// Its stored tag.
    pub tag: Tag,
    /// Where the plaintext goes (zeroed on failure).
    pub out: &'a mut Page,
}

/// Faithful mode: XTS-encrypt one page and compute its plaintext checksum.
pub struct XtsJob<'a> {
    /// Page index (the XTS tweak).
    pub page_index: u64,
    /// Input page.
    pub input: &'a Page,
    /// Output page.
    pub out: &'a mut Page,
    /// Encrypt: the checksum of the plaintext input, computed if asked. Decrypt: if set, the
    /// decrypted page is verified against it.
    pub checksum: Option<PageChecksum>,
}

/// Any scheme: protect (seal) or recover (open) one page through a [`PageProtector`].
pub struct ProtectJob<'a> {
    /// Page index.
    pub page_index: u64,
    /// Version (fresh from the PMO's version counter when sealing).
    pub version: u64,
    /// Input page: plaintext to seal, or at-rest page to open.
    pub input: &'a Page,
    /// Output page.
    pub out: &'a mut Page,
    /// Seal: set to the metadata slot to store. Open: the stored metadata slot.
    pub meta: [u8; PAGE_META_LEN],
}

/// A fixed pool of crypto workers.
pub struct CryptoPool {
    pool: rayon::ThreadPool,
    threads: usize,
    min_parallel_work_ns: u64,
    max_batches_in_flight: usize,
    in_flight: AtomicUsize,
}

impl std::fmt::Debug for CryptoPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CryptoPool")
            .field("threads", &self.threads)
            .field("min_parallel_work_ns", &self.min_parallel_work_ns)
            .finish()
    }
}

impl CryptoPool {
    /// A pool of `threads` workers (0 = number of available cores).
    pub fn new(threads: usize) -> Result<Self, CryptError> {
        Self::with_limits(
            threads,
            DEFAULT_MIN_PARALLEL_WORK_NS,
            DEFAULT_MAX_BATCHES_IN_FLIGHT,
        )
    }

    /// A pool with explicit bounds (see the module doc).
    pub fn with_limits(
        threads: usize,
        min_parallel_work_ns: u64,
        max_batches_in_flight: usize,
    ) -> Result<Self, CryptError> {
        let threads = if threads == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            threads
        };
        // The calling thread does one share of every batch, so the pool needs one thread fewer.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.saturating_sub(1).max(1))
            .thread_name(|i| format!("pmo-crypt-{i}"))
            .build()
            .map_err(|e| CryptError::Pool(e.to_string()))?;
        Ok(Self {
            pool,
            threads,
            min_parallel_work_ns,
            max_batches_in_flight: max_batches_in_flight.max(1),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Number of threads a batch runs on (the caller plus `threads - 1` workers).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run `f` on every job, in parallel when the batch's estimated work (`jobs.len()` x
    /// `job_cost_ns`) reaches `min_parallel_work_ns` and the pool has room. Returns the first
    /// failure by job index (all jobs are still attempted).
    pub fn run<J, F>(&self, jobs: &mut [J], job_cost_ns: u64, f: F) -> Result<(), CryptError>
    where
        J: Send,
        F: Fn(&mut J) -> Result<(), CryptError> + Sync,
    {
        let sequential = |jobs: &mut [J], base: usize| -> Result<(), (usize, CryptError)> {
            let mut first = Ok(());
            for (i, job) in jobs.iter_mut().enumerate() {
                if let Err(e) = f(job) {
                    if first.is_ok() {
                        first = Err((base + i, e));
                    }
                }
            }
            first
        };
        let wrap = |r: Result<(), (usize, CryptError)>| {
            r.map_err(|(job_index, e)| CryptError::Batch {
                job_index,
                source: Box::new(e),
            })
        };
        let work_ns = (jobs.len() as u64).saturating_mul(job_cost_ns);
        if work_ns < self.min_parallel_work_ns || self.threads == 1 || jobs.len() < 2 {
            return wrap(sequential(jobs, 0));
        }
        struct InFlight<'a>(&'a AtomicUsize);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let admitted = self.in_flight.fetch_add(1, Ordering::AcqRel) < self.max_batches_in_flight;
        let _in_flight = InFlight(&self.in_flight); // released on every exit, panics included
        if !admitted {
            return wrap(sequential(jobs, 0));
        }
        // The caller seals the first chunk itself while the workers take the others: one
        // wake-up fewer, and no core idles while the caller waits.
        let chunk = jobs.len().div_ceil(self.threads);
        let first_error: Mutex<Option<(usize, CryptError)>> = Mutex::new(None);
        let record = |r: Result<(), (usize, CryptError)>| {
            if let Err((index, e)) = r {
                let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                if slot.as_ref().is_none_or(|(i, _)| index < *i) {
                    *slot = Some((index, e));
                }
            }
        };
        self.pool.in_place_scope(|scope| {
            let mut chunks = jobs.chunks_mut(chunk).enumerate();
            let own = chunks.next();
            for (c, part) in chunks {
                let (sequential, record) = (&sequential, &record);
                scope.spawn(move |_| record(sequential(part, c * chunk)));
            }
            if let Some((_, part)) = own {
                record(sequential(part, 0));
            }
        });
        let result = match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        };
        wrap(result)
    }

    /// Seal every job's page (secure mode).
    pub fn seal_batch(&self, keys: &PmoKeys, jobs: &mut [SealJob<'_>]) -> Result<(), CryptError> {
        self.run(jobs, cost_hint_ns::AEAD_PAGE, |j| {
            j.tag = Some(seal_page(keys, &j.ctx, j.plaintext, j.out)?);
            Ok(())
        })
    }

    /// Verify and decrypt every job's page (secure mode).
    pub fn open_batch(&self, keys: &PmoKeys, jobs: &mut [OpenJob<'_>]) -> Result<(), CryptError> {
        self.run(jobs, cost_hint_ns::AEAD_PAGE, |j| {
            open_page(keys, &j.ctx, j.sealed, &j.tag, j.out)
        })
    }

    /// Seal every job's page with `protector` (any scheme), filling each job's `meta`.
    pub fn protect_batch(
        &self,
        protector: &PageProtector,
        jobs: &mut [ProtectJob<'_>],
    ) -> Result<(), CryptError> {
        self.run(jobs, protector.cost_hint_ns(), |j| {
            j.meta = protector.seal(j.page_index, j.version, j.input, j.out)?;
            Ok(())
        })
    }

    /// Open every job's page with `protector` (any scheme), checking it against `meta`.
    pub fn recover_batch(
        &self,
        protector: &PageProtector,
        jobs: &mut [ProtectJob<'_>],
    ) -> Result<(), CryptError> {
        self.run(jobs, protector.cost_hint_ns(), |j| {
            protector.open(j.page_index, j.version, &j.meta, j.input, j.out)
        })
    }

    /// Faithful mode: XTS-encrypt every page; with `checksums`, also compute each plaintext's
    /// SHA-256 into the job.
    pub fn xts_encrypt_batch(
        &self,
        keys: &FaithfulKeys,
        jobs: &mut [XtsJob<'_>],
        checksums: bool,
    ) -> Result<(), CryptError> {
        let cost = cost_hint_ns::XTS_PAGE
            + if checksums {
                cost_hint_ns::SHA256_PAGE
            } else {
                0
            };
        self.run(jobs, cost, |j| {
            if checksums {
                j.checksum = Some(page_checksum(j.input));
            }
            keys.encrypt_page(j.page_index, j.input, j.out)
        })
    }

    /// Faithful mode: XTS-decrypt every page, verifying those whose job carries a checksum.
    pub fn xts_decrypt_batch(
        &self,
        keys: &FaithfulKeys,
        jobs: &mut [XtsJob<'_>],
    ) -> Result<(), CryptError> {
        let cost = cost_hint_ns::XTS_PAGE + cost_hint_ns::SHA256_PAGE;
        self.run(jobs, cost, |j| match j.checksum {
            Some(sum) => keys.decrypt_and_verify(j.page_index, j.input, &sum, j.out),
            None => keys.decrypt_page(j.page_index, j.input, j.out),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MasterKey, PAGE_SIZE};

    fn ctx(i: u64) -> PageCtx {
        PageCtx {
            pool_uuid: [1; 16],
            pmo_uuid: [2; 16],
            page_index: i,
            version: 1000 + i,
        }
    }

    #[test]
    fn parallel_batch_matches_sequential_and_reports_first_failure() {
        let keys = PmoKeys::derive(&MasterKey::from_bytes([8; 32]), [1; 16], [2; 16]).unwrap();
        let pool = CryptoPool::with_limits(2, 4, 2).unwrap();
        let n = 40;
        let plain: Vec<Page> = (0..n).map(|i| [i as u8; PAGE_SIZE]).collect();
        let mut sealed = vec![[0u8; PAGE_SIZE]; n];
        let mut jobs: Vec<SealJob> = plain
            .iter()
            .zip(sealed.iter_mut())
            .enumerate()
            .map(|(i, (p, o))| SealJob::new(ctx(i as u64), p, o))
            .collect();
        pool.seal_batch(&keys, &mut jobs).unwrap();
        let tags: Vec<Tag> = jobs.iter().map(|j| j.tag.unwrap()).collect();
        drop(jobs);
        for i in 0..n {
            let mut one = [0u8; PAGE_SIZE];
            let t = seal_page(&keys, &ctx(i as u64), &plain[i], &mut one).unwrap();
            assert_eq!(t, tags[i]);
            assert_eq!(one, sealed[i]);
        }
        sealed[7][0] ^= 1;
        sealed[30][0] ^= 1;
        let mut outs = vec![[0u8; PAGE_SIZE]; n];
        let mut jobs: Vec<OpenJob> = sealed
            .iter()
            .zip(outs.iter_mut())
            .enumerate()
            .map(|(i, (s, o))| OpenJob {
                ctx: ctx(i as u64),
                sealed: s,
                tag: tags[i],
                out: o,
            })
            .collect();
        let err = pool.open_batch(&keys, &mut jobs).unwrap_err();
        assert_eq!(
            err,
            CryptError::Batch {
                job_index: 7,
                source: Box::new(CryptError::Integrity)
            }
        );
        drop(jobs);
        assert_eq!(outs[0], plain[0]);
        assert!(outs[30].iter().all(|&b| b == 0));
    }

    #[test]
    fn caller_takes_first_chunk_and_a_worker_the_rest() {
        let pool = CryptoPool::with_limits(2, 1, 1).unwrap();
        let mut seen: Vec<Option<std::thread::ThreadId>> = vec![None; 8];
        pool.run(&mut seen, 1, |slot| {
            *slot = Some(std::thread::current().id());
            Ok(())
        })
        .unwrap();
        let me = std::thread::current().id();
        assert!(
            seen[..4].iter().all(|t| *t == Some(me)),
            "first chunk on the caller"
        );
        assert!(
            seen[4..].iter().all(|t| t.is_some() && *t != Some(me)),
            "second chunk on a worker"
        );
        // below the work threshold everything stays on the caller
        let inline = CryptoPool::with_limits(2, u64::MAX, 1).unwrap();
        inline
            .run(&mut seen, 1, |slot| {
                *slot = Some(std::thread::current().id());
                Ok(())
            })
            .unwrap();
        assert!(seen.iter().all(|t| *t == Some(me)));
    }

    #[test]
    fn protect_and_recover_batches_for_a_protector() {
        let m = MasterKey::from_bytes([8; 32]);
        let protector = PageProtector::Aead {
            keys: std::sync::Arc::new(PmoKeys::derive(&m, [1; 16], [2; 16]).unwrap()),
        };
        let pool = CryptoPool::with_limits(2, 1, 1).unwrap();
        let plain: Vec<Page> = (0..9).map(|i| [i as u8; PAGE_SIZE]).collect();
        let mut sealed = vec![[0u8; PAGE_SIZE]; 9];
        let mut jobs: Vec<ProtectJob> = plain
            .iter()
            .zip(sealed.iter_mut())
            .enumerate()
            .map(|(i, (p, o))| ProtectJob {
                page_index: i as u64,
                version: 50 + i as u64,
                input: p,
                out: o,
                meta: [0; 32],
            })
            .collect();
        pool.protect_batch(&protector, &mut jobs).unwrap();
        let metas: Vec<[u8; 32]> = jobs.iter().map(|j| j.meta).collect();
        drop(jobs);
        let mut back = vec![[0u8; PAGE_SIZE]; 9];
        let mut jobs: Vec<ProtectJob> = sealed
            .iter()
            .zip(back.iter_mut())
            .enumerate()
            .map(|(i, (s, o))| ProtectJob {
                page_index: i as u64,
                version: 50 + i as u64,
                input: s,
                out: o,
                meta: metas[i],
            })
            .collect();
        pool.recover_batch(&protector, &mut jobs).unwrap();
        drop(jobs);
        assert_eq!(back, plain);
    }

    #[test]
    fn xts_batch_round_trip_with_checksums() {
        let keys = FaithfulKeys::derive(&MasterKey::from_bytes([8; 32]), [1; 16], [2; 16]).unwrap();
        let pool = CryptoPool::with_limits(2, 1, 2).unwrap();
        let plain: Vec<Page> = (0..20).map(|i| [i as u8 ^ 0x5A; PAGE_SIZE]).collect();
        let mut ct = vec![[0u8; PAGE_SIZE]; 20];
        let mut jobs: Vec<XtsJob> = plain
            .iter()
            .zip(ct.iter_mut())
            .enumerate()
            .map(|(i, (p, o))| XtsJob {
                page_index: i as u64,
                input: p,
                out: o,
                checksum: None,
            })
            .collect();
        pool.xts_encrypt_batch(&keys, &mut jobs, true).unwrap();
        let sums: Vec<PageChecksum> = jobs.iter().map(|j| j.checksum.unwrap()).collect();
        drop(jobs);
        let mut back = vec![[0u8; PAGE_SIZE]; 20];
        let mut jobs: Vec<XtsJob> = ct
            .iter()
            .zip(back.iter_mut())
            .enumerate()
            .map(|(i, (c, o))| XtsJob {
                page_index: i as u64,
                input: c,
                out: o,
                checksum: Some(sums[i]),
            })
            .collect();
        pool.xts_decrypt_batch(&keys, &mut jobs).unwrap();
        drop(jobs);
        assert_eq!(back, plain);
    }
}
