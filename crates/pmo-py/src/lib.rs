//! `pmo._pmo`: the native module of the Python package `pmo` (see `python/pmo/__init__.py`
//! for the Python API and `docs/python.md` for the design).
//!
//! | module | owns |
//! |---|---|
//! | `pool` | `Pool`: open, init, create, destroy, list, info, check, attach |
//! | `attachment` | `Attachment`: psync, rollback, stats, detach (GIL released) |
//! | `region` | `Region`: the buffer exporter over the mapping, with counted exports |
//! | `errors` | the exception hierarchy |
#![deny(unsafe_code)]

mod attachment;
mod errors;
mod pool;
mod region;

use pyo3::prelude::*;

/// The native half of `pmo`.
#[pymodule]
fn _pmo(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<pool::Pool>()?;
    m.add_class::<attachment::Attachment>()?;
    m.add("Region", region::region_type(m.py())?)?;
    m.add(
        "SCHEMES",
        pmo_store::Scheme::all_placements()
            .map(|s| s.name())
            .collect::<Vec<_>>(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FAULT_MECHANISM", pmo_store::attach::fault_mechanism_name())?;
    Ok(())
}
