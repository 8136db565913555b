//! `pmo._pmo.Pool`: a pool of PMOs (open, init, create, destroy, list, info, check, attach,
//! and a PMO's life after pcreate: resize, rename, copy, rekey, rotate, snapshot, export,
//! import; `docs/lifecycle.md`).

use std::path::PathBuf;
use std::time::Duration;

use pmo_store::{AttachOptions, DirtyTracking, KdfParams, Perm, PmoInfo, PoolOptions, Scheme};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use zeroize::Zeroizing;

use crate::attachment::Attachment;
use crate::errors::{to_py, IntegrityError, IntoPy};

/// A key given as `str` (its UTF-8 bytes, as `PMO_KEY` in the CLI) or `bytes`.
/// A `str` that has no UTF-8 form (a lone surrogate) raises its `UnicodeEncodeError`.
fn key_bytes(key: &Bound<'_, PyAny>) -> PyResult<Zeroizing<Vec<u8>>> {
    if key.is_instance_of::<PyString>() {
        return Ok(Zeroizing::new(key.extract::<String>()?.into_bytes()));
    }
    if let Ok(b) = key.downcast::<PyBytes>() {
        return Ok(Zeroizing::new(b.as_bytes().to_vec()));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(
        "key must be str or bytes",
    ))
}

fn parse_scheme(name: &str) -> PyResult<Scheme> {
    Scheme::from_name(name).py()
}

fn scheme_name(code: u32) -> String {
    Scheme::from_code(code).map_or_else(|_| format!("unknown({code:#x})"), |s| s.name())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A PMO's description as a dict (the fields of `pmo list` / `pmo info NAME`).
fn pmo_dict<'py>(py: Python<'py>, p: &PmoInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &p.name)?;
    d.set_item("size", p.size)?;
    d.set_item("uuid", hex(&p.uuid))?;
    d.set_item("scheme", scheme_name(p.scheme))?;
    d.set_item("state", p.state.name())?;
    d.set_item("holder_pid", p.holder_pid)?;
    d.set_item("readers", p.readers)?;
    d.set_item("oldest_pin", p.oldest_pin)?;
    d.set_item("base_addr", p.base_addr)?;
    d.set_item("extent_off", p.extent_off)?;
    d.set_item("extent_len", p.extent_len)?;
    d.set_item("capacity", p.capacity)?;
    d.set_item("created_unix_s", p.created_unix_s)?;
    Ok(d)
}

/// An open pool.
#[pyclass(module = "pmo._pmo", name = "Pool", frozen)]
pub struct Pool {
    pool: pmo_store::Pool,
    path: PathBuf,
}

impl Pool {
    fn context(&self) -> String {
        format!("pool {}", self.path.display())
    }
}

#[pymethods]
impl Pool {
    /// Open the pool at `path` (default: `PMO_POOL`, else ~/.local/share/pmo/default.pool),
    /// recovering every PMO nobody holds.
    #[new]
    #[pyo3(signature = (path=None))]
    fn open(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Pool> {
        let path = path.unwrap_or_else(pmo_store::default_pool_path);
        let pool = py
            .allow_threads(|| pmo_store::Pool::open(&path))
            .map_err(|e| to_py(e, Some(&format!("pool {}", path.display()))))?;
        Ok(Pool { pool, path })
    }

    /// Create a pool file of `size` bytes (as `pmo init`).
    #[staticmethod]
    #[pyo3(signature = (path, size, *, scheme="secure", kdf_mem_kib=None, kdf_iters=None, max_pmos=None, sparse=false))]
    #[allow(clippy::too_many_arguments)]
    fn init(
        py: Python<'_>,
        path: Option<PathBuf>,
        size: u64,
        scheme: &str,
        kdf_mem_kib: Option<u32>,
        kdf_iters: Option<u32>,
        max_pmos: Option<u64>,
        sparse: bool,
    ) -> PyResult<Pool> {
        let path = path.unwrap_or_else(pmo_store::default_pool_path);
        let ctx = format!("pool {}", path.display());
        // As `pmo init`: what this call creates (the file, missing parent directories) is
        // removed again if it fails, so that a corrected retry does not meet a dead file.
        let mut made_dirs: Vec<PathBuf> = Vec::new();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            made_dirs = dir
                .ancestors()
                .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
                .map(PathBuf::from)
                .collect();
            std::fs::create_dir_all(dir).map_err(|e| {
                crate::errors::MediumError::new_err(format!("create {}: {e}", dir.display()))
            })?;
        }
        let undo = |e: pmo_store::StoreError| {
            // Not a file someone else made (`PoolExists`), nor a device it formats.
            let ours = !matches!(e, pmo_store::StoreError::PoolExists(_))
                && path.symlink_metadata().is_ok_and(|m| m.is_file());
            if ours {
                let _ = std::fs::remove_file(&path);
            }
            for d in &made_dirs {
                let _ = std::fs::remove_dir(d);
            }
            to_py(e, Some(&ctx))
        };
        let opts = PoolOptions {
            kdf: KdfParams {
                m_kib: kdf_mem_kib.unwrap_or(KdfParams::DEFAULT.m_kib),
                t: kdf_iters.unwrap_or(KdfParams::DEFAULT.t),
                ..KdfParams::DEFAULT
            },
            ns_capacity: max_pmos,
            preallocate: !sparse,
            scheme: parse_scheme(scheme).inspect_err(|_| {
                for d in &made_dirs {
                    let _ = std::fs::remove_dir(d);
                }
            })?,
            ..PoolOptions::default()
        };
        let pool = py
            .allow_threads(|| pmo_store::Pool::create(&path, size, &opts))
            .map_err(undo)?;
        Ok(Pool { pool, path })
    }

    /// The pool's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Create a PMO of `size` bytes protected by `key`, laid out for `max_size` bytes when
    /// given (resizes up to it change only metadata); returns its description.
    #[pyo3(signature = (name, size, key, scheme=None, max_size=None))]
    fn create<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        size: u64,
        key: &Bound<'py, PyAny>,
        scheme: Option<&str>,
        max_size: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = key_bytes(key)?;
        let scheme = scheme.map(parse_scheme).transpose()?;
        let max = max_size.unwrap_or(0);
        let info = py
            .allow_threads(|| self.pool.pcreate_max(name, size, max, &key, scheme))
            .py()?;
        pmo_dict(py, &info)
    }

    /// Grow or shrink PMO `name` to `size` bytes (`force`: drop pages holding data).
    #[pyo3(signature = (name, size, key, *, force=false))]
    fn resize<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        size: u64,
        key: &Bound<'py, PyAny>,
        force: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = key_bytes(key)?;
        let r = py
            .allow_threads(|| {
                let opts = pmo_store::ResizeOptions {
                    force,
                    progress: None,
                };
                self.pool.resize(name, size, &key, opts)
            })
            .py()?;
        let d = pmo_dict(py, &r.info)?;
        d.set_item("old_size", r.old_size)?;
        d.set_item("pages_copied", r.pages_copied)?;
        d.set_item("pages_dropped", r.pages_dropped)?;
        d.set_item("address_kept", r.address_kept)?;
        d.set_item("in_place", r.in_place)?;
        Ok(d)
    }

    /// Rename PMO `name` to `new`.
    fn rename<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        new: &str,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = key_bytes(key)?;
        let info = py
            .allow_threads(|| self.pool.rename(name, new, &key))
            .py()?;
        pmo_dict(py, &info)
    }

    /// Change PMO `name`'s key to `new_key` (a re-wrap: no page is re-encrypted).
    fn rekey<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        key: &Bound<'py, PyAny>,
        new_key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (key, new_key) = (key_bytes(key)?, key_bytes(new_key)?);
        let info = py
            .allow_threads(|| self.pool.rekey(name, &key, &new_key))
            .py()?;
        pmo_dict(py, &info)
    }

    /// Re-encrypt every page of PMO `name` under a new data key (the user key stays).
    fn rotate<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = key_bytes(key)?;
        let info = py
            .allow_threads(|| self.pool.rotate(name, &key, &mut |_, _| {}))
            .py()?;
        pmo_dict(py, &info)
    }

    /// Copy PMO `name` to a new PMO `new` (its own uuid and nonces; `new_key`, else `key`).
    #[pyo3(signature = (name, new, key, new_key=None))]
    fn copy<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        new: &str,
        key: &Bound<'py, PyAny>,
        new_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = key_bytes(key)?;
        let new_key = new_key.map(key_bytes).transpose()?;
        let info = py
            .allow_threads(|| {
                self.pool.copy(
                    name,
                    new,
                    &key,
                    new_key.as_deref().map(|k| &k[..]),
                    &mut |_, _| {},
                )
            })
            .py()?;
        pmo_dict(py, &info)
    }

    /// A consistent copy of PMO `name` as of one psync, as a new PMO `new`, while its writer
    /// keeps working. Returns the new PMO's description with the snapshot's `seq`, `passes`,
    /// `pages_copied` and `gated`.
    #[pyo3(signature = (name, new, key, new_key=None))]
    fn snapshot<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        new: &str,
        key: &Bound<'py, PyAny>,
        new_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = key_bytes(key)?;
        let new_key = new_key.map(key_bytes).transpose()?;
        let (info, r) = py
            .allow_threads(|| {
                self.pool.snapshot(
                    name,
                    new,
                    &key,
                    new_key.as_deref().map(|k| &k[..]),
                    &mut |_, _| {},
                )
            })
            .py()?;
        let d = pmo_dict(py, &info)?;
        d.set_item("seq", r.seq)?;
        d.set_item("passes", r.passes)?;
        d.set_item("pages_copied", r.pages_copied)?;
        d.set_item("gated", r.gated)?;
        Ok(d)
    }

    /// Write PMO `name`'s last psynced state to the export file `path` (encrypted and
    /// integrity-protected); returns the pages written.
    fn export(
        &self,
        py: Python<'_>,
        name: &str,
        key: &Bound<'_, PyAny>,
        path: PathBuf,
    ) -> PyResult<u64> {
        let key = key_bytes(key)?;
        py.allow_threads(|| self.pool.export(name, &key, &path, &mut |_, _| {}))
            .py()
    }

    /// Import the export file `path` as PMO `name` (default: its exported name), verified
    /// whole before anything is created.
    #[pyo3(signature = (path, key, name=None))]
    fn import_file<'py>(
        &self,
        py: Python<'py>,
        path: PathBuf,
        key: &Bound<'py, PyAny>,
        name: Option<&str>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = key_bytes(key)?;
        let info = py
            .allow_threads(|| self.pool.import(&path, name, &key, &mut |_, _| {}))
            .py()?;
        pmo_dict(py, &info)
    }

    /// Destroy a PMO (needs its key; fails with `Busy` while it is attached).
    fn destroy(&self, py: Python<'_>, name: &str, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_bytes(key)?;
        py.allow_threads(|| {
            self.pool.pdestroy(name, &key)?;
            // LMDB's lock directory of an environment it held goes with it (as `pmo destroy`,
            // docs/lmdb.md); one still in use is left for `pmo lmdb locks --clean`.
            let root = pmo_lmdb_lockdir::lock_root();
            let _ = pmo_lmdb_lockdir::remove_for(&root, &self.pool, name);
            Ok(())
        })
        .py()
    }

    /// Every PMO, as a list of dicts.
    fn list<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.pool
            .list()
            .py()?
            .iter()
            .map(|p| pmo_dict(py, p))
            .collect()
    }

    /// One PMO's description, or the pool's when `name` is None.
    #[pyo3(signature = (name=None))]
    fn info<'py>(&self, py: Python<'py>, name: Option<&str>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(name) = name {
            return pmo_dict(py, &self.pool.info(name).py()?);
        }
        let i = self.pool.pool_info().py()?;
        let d = PyDict::new(py);
        d.set_item("path", &self.path)?;
        d.set_item("medium", i.medium.name())?;
        d.set_item("uuid", hex(&i.uuid))?;
        d.set_item("format_version", i.format_version)?;
        d.set_item("pool_size", i.pool_size)?;
        d.set_item("heap_len", i.heap_len)?;
        d.set_item("free_bytes", i.free_bytes)?;
        d.set_item("largest_free", i.largest_free)?;
        d.set_item("max_pmos", i.ns_capacity)?;
        d.set_item("pmos", i.pmos)?;
        d.set_item("base_addr", i.base_addr)?;
        d.set_item("default_scheme", scheme_name(i.config.scheme))?;
        Ok(d)
    }

    /// Verify every checksum, the namespace and the space accounting. Returns the report as a
    /// dict; raises `IntegrityError` (the CLI's exit code 2) when problems were found.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = py.allow_threads(|| self.pool.check()).py()?;
        if !r.problems.is_empty() {
            return Err(IntegrityError::new_err(format!(
                "{}: {} problem(s) found: {}",
                self.context(),
                r.problems.len(),
                r.problems.join("; ")
            )));
        }
        let d = PyDict::new(py);
        d.set_item("pmos", r.pmos)?;
        d.set_item("skipped", r.skipped)?;
        d.set_item("used_bytes", r.used_bytes)?;
        d.set_item("free_bytes", r.free_bytes)?;
        d.set_item("heap_len", r.heap_len)?;
        Ok(d)
    }

    /// Attach PMO `name` (`mode` "r" or "w"); the native half of `pmo.PmoObject`.
    #[pyo3(signature = (name, key, mode="r", *, wait=None, relocate=false, scheme=None))]
    #[allow(clippy::too_many_arguments)]
    fn attach_native(
        &self,
        py: Python<'_>,
        name: &str,
        key: &Bound<'_, PyAny>,
        mode: &str,
        wait: Option<f64>,
        relocate: bool,
        scheme: Option<&str>,
    ) -> PyResult<Attachment> {
        let perm = match mode {
            "r" => Perm::Read,
            "w" => Perm::Write,
            other => {
                return Err(crate::errors::InvalidArgument::new_err(format!(
                    "mode must be \"r\" or \"w\", not {other:?}"
                )))
            }
        };
        let wait = wait
            .map(|s| {
                Duration::try_from_secs_f64(s).map_err(|_| {
                    crate::errors::InvalidArgument::new_err(format!(
                        "wait must be a number of seconds >= 0, not {s}"
                    ))
                })
            })
            .transpose()?;
        let key = key_bytes(key)?;
        // Writes through Python buffers cannot be declared: never attach with declared tracking.
        let tracking = match DirtyTracking::from_env() {
            Some(DirtyTracking::Declared) => Some(pmo_store::DEFAULT_TRACKING),
            t => t,
        };
        let opts = AttachOptions {
            wait,
            relocate,
            tracking,
            scheme: scheme.map(parse_scheme).transpose()?,
            ..AttachOptions::default()
        };
        let a = py
            .allow_threads(|| self.pool.attach_with(name, perm, &key, opts))
            .py()?;
        Ok(Attachment::new(a))
    }

    fn __repr__(&self) -> String {
        format!("pmo.Pool({:?})", self.path.display().to_string())
    }
}
