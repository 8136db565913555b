//! The store's side of write-back (`crate::writeback` has the policy and the list): taking
//! the kept files due, writing each back (psync if written, detach), and the last write-back
//! when the store goes.

use super::*;

impl Inner {
    /// Take the kept files due for write-back (all of them if `all`) out of `tree`.
    pub(super) fn take_due(&self, tree: &mut Tree, all: bool) -> Vec<Arc<OpenFile>> {
        let paths = tree.closed.due(&self.opts.write_back, Instant::now(), all);
        paths
            .into_iter()
            .filter_map(|p| tree.files.remove(&p).map(|e| e.file))
            .collect()
    }

    /// Write back `files` (taken out of the tree); the first error, after trying them all.
    pub(super) fn write_back_all(&self, files: Vec<Arc<OpenFile>>) -> Result<()> {
        let mut first = Ok(());
        for f in files {
            if let Err(e) = self.write_back(f) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// The write-back thread's look: the kept files closed long enough ago.
    pub(super) fn write_back_pass(&self) {
        let due = self.take_due(&mut lock(&self.open), false);
        if let Err(e) = self.write_back_all(due) {
            lock(&self.write_back_errors).push(e);
        }
    }

    /// A file taken out of the tree: psync it if written, detach its PMOs, and destroy the
    /// segments past its size once that size is durable.
    pub(super) fn write_back(&self, file: Arc<OpenFile>) -> Result<()> {
        let mut st = lock(&file.state);
        // Written data stays: a written file is psynced before its detach (which would discard
        // it).
        let r = if st.dirty { sync(&mut st) } else { Ok(()) };
        let needed = header::segments_for(st.header.first_pmo_bytes, st.header.size) as usize;
        let mut total = SessionStats::default();
        let had = st.segs.len();
        for seg in st.segs.drain(..) {
            let s = seg.att.session_stats();
            let t = Instant::now();
            seg.att.detach()?;
            let mut s = s;
            s.detach_ns = t.elapsed().as_nanos() as u64;
            total.accumulate(&s.with_compute());
        }
        lock(&self.stats).accumulate(&total);
        if had > needed.max(1) && r.is_ok() {
            // The file shrank and its size is durable: the segments past it are no longer
            // needed (highest first).
            for i in (needed.max(1)..had).rev() {
                let name = file.path.pmo_name(Kind::Segment(i as u32));
                self.pool.pdestroy(&name, &self.opts.key)?;
            }
        }
        r
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The store's last reference: every kept file is written back (nobody is left to
        // report an error to; `sync_all` first to see them).
        let due = self.take_due(&mut lock(&self.open), true);
        let _ = self.write_back_all(due);
    }
}

/// psync a file's written segments, then its first PMO (which holds the size).
pub(super) fn sync(st: &mut FileState) -> Result<()> {
    for seg in st.segs.iter_mut().skip(1).filter(|s| s.dirty) {
        seg.att.psync()?;
        seg.dirty = false;
    }
    if let Some(first) = st.segs.first_mut() {
        first.att.psync()?;
        first.dirty = false;
    }
    st.dirty = false;
    Ok(())
}
