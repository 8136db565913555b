//! `pmo._pmo.Attachment`: the native half of an attached PMO (psync, rollback, stats, detach).

use std::sync::Arc;

use pmo_store::Perm;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{IntoPy, InvalidArgument};
use crate::region::RegionState;

/// An attached PMO. Python code uses it through `pmo.PmoObject`.
#[pyclass(module = "pmo._pmo", name = "Attachment", frozen)]
pub struct Attachment {
    /// The mapping's state, which owns the store's attachment (`RegionState::attachment`):
    /// psync and rollback take it shared (with the GIL released), detach exclusively.
    state: Arc<RegionState>,
    name: String,
    size: usize,
    writable: bool,
    addr: usize,
    relocated: bool,
    mechanism: String,
    tracking: String,
}

impl Attachment {
    pub fn new(a: pmo_store::Attachment) -> Attachment {
        Attachment {
            name: a.name().to_string(),
            size: a.len(),
            writable: a.perm() == Perm::Write,
            addr: a.addr() as usize,
            relocated: a.relocated(),
            mechanism: a.mechanism().name().to_string(),
            tracking: a.dirty_tracking().to_string(),
            state: Arc::new(RegionState::new(a)),
        }
    }

    /// Run `f` on the live attachment with the GIL released.
    fn with_live<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&pmo_store::Attachment) -> pmo_store::Result<T> + Send,
    ) -> PyResult<T> {
        py.allow_threads(|| {
            let g = self
                .state
                .attachment
                .read()
                .unwrap_or_else(|e| e.into_inner());
            match g.as_ref() {
                Some(a) => Ok(f(a)),
                None => Err(()),
            }
        })
        .map_err(|()| self.detached_err())?
        .py()
    }

    fn detached_err(&self) -> PyErr {
        InvalidArgument::new_err(format!("PMO '{}' is detached", self.name))
    }
}

#[pymethods]
impl Attachment {
    /// Point a `Region` (the buffer base of `pmo.PmoObject`) at this PMO's memory.
    fn bind(&self, region: &Bound<'_, PyAny>) -> PyResult<()> {
        let module = region.py().import("pmo._pmo")?;
        crate::region::bind(region, &module.getattr("Region")?, &self.state)
    }

    /// Make every change since the previous psync durable, atomically.
    fn psync<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with_live(py, |a| a.psync())?;
        let d = PyDict::new(py);
        d.set_item("seq", s.seq)?;
        d.set_item("pages", s.pages)?;
        d.set_item("bytes_persisted", s.bytes_persisted)?;
        d.set_item("fences", s.fences)?;
        d.set_item("elapsed_ns", s.elapsed_ns)?;
        Ok(d)
    }

    /// Move a read-only attachment to the newest psync (readers beside a writer); returns the
    /// psync it now shows.
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_live(py, |a| a.refresh())
    }

    /// The psync this attachment shows (a reader's snapshot; a writer's newest psync).
    fn snapshot_seq(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_live(py, |a| Ok(a.snapshot_seq()))
    }

    /// Undo every change since the last psync; returns the number of pages restored.
    fn rollback(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_live(py, |a| a.rollback())
    }

    /// This session's time categories (ns), faults, pages and predictions, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with_live(py, |a| Ok(a.session_stats()))?;
        let d = PyDict::new(py);
        for (k, v) in [
            ("wall_ns", s.wall_ns),
            ("attach_stall_ns", s.attach_stall_ns),
            ("attach_other_ns", s.attach_other_ns),
            ("pf_ns", s.pf_ns),
            ("psync_crypt_ns", s.psync_crypt_ns),
            ("psync_persist_ns", s.psync_persist_ns),
            ("detach_ns", s.detach_ns),
            ("compute_ns", s.compute_ns),
            ("faults", s.faults),
            ("pages_decrypted", s.pages_decrypted),
            ("pages_encrypted", s.pages_encrypted),
            ("psyncs", s.psyncs),
            ("bytes_persisted", s.bytes_persisted),
            ("predicted", s.predicted),
        ] {
            d.set_item(k, v)?;
        }
        let cats = PyDict::new(py);
        for (k, v) in s.categories() {
            cats.set_item(k, v)?;
        }
        d.set_item("categories", cats)?;
        Ok(d)
    }

    /// Unmap and release. Raises `BufferError` while memoryviews or arrays still point into
    /// the PMO. Changes not psynced are discarded. Detaching twice is a no-op.
    fn detach(&self, py: Python<'_>) -> PyResult<()> {
        // Under the GIL: no buffer can be taken between this check and `retire`.
        let n = self.state.exports();
        if n > 0 {
            return Err(PyBufferError::new_err(format!(
                "cannot detach PMO '{}': {n} buffer(s) (memoryviews or NumPy arrays) still point into it; release them first (del, or memoryview.release())",
                self.name
            )));
        }
        self.state.retire();
        let a = py.allow_threads(|| {
            self.state
                .attachment
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .take()
        });
        if let Some(a) = a {
            py.allow_threads(|| a.detach()).py()?;
        }
        Ok(())
    }

    /// Buffers (memoryviews, arrays) currently pointing into the PMO.
    #[getter]
    fn exports(&self) -> usize {
        self.state.exports()
    }
    #[getter]
    fn detached(&self) -> bool {
        !self.state.is_live()
    }
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }
    #[getter]
    fn size(&self) -> usize {
        self.size
    }
    #[getter]
    fn writable(&self) -> bool {
        self.writable
    }
    #[getter]
    fn address(&self) -> usize {
        self.addr
    }
    #[getter]
    fn relocated(&self) -> bool {
        self.relocated
    }
    #[getter]
    fn mechanism(&self) -> &str {
        &self.mechanism
    }
    #[getter]
    fn dirty_tracking(&self) -> &str {
        &self.tracking
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // Reached only when nothing refers to this object (under the GIL, which serialises
        // it with the buffer slots). Retire the state so no new buffer is taken; with none
        // exported, detach now (`pmo_store::Attachment` detaches on drop). With buffers still
        // exported (Python code dropped this object from under its `PmoObject`), leave the
        // attachment to the shared state: the last `Region` bound to it drops it, after the
        // last buffer is released.
        self.state.retire();
        if self.state.exports() == 0 {
            let a = self
                .state
                .attachment
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            drop(a);
        }
    }
}
