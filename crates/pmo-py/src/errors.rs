//! The exception hierarchy of `pmo` and the mapping from the store's errors onto it.
//! Messages are the store's, exactly as the `pmo` command prints them.

use pmo_store::StoreError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(_pmo, Error, PyException, "Base class of every pmo error.");
create_exception!(_pmo, WrongKey, Error, "The key does not open this PMO.");
create_exception!(_pmo, NotFound, Error, "No PMO of that name.");
create_exception!(
    _pmo,
    PoolNotFound,
    NotFound,
    "No pool at the path (the same sentence as the `pmo` command's)."
);
create_exception!(
    _pmo,
    Exists,
    Error,
    "A PMO (or pool file) of that name already exists."
);
create_exception!(
    _pmo,
    Busy,
    Error,
    "Another user has the PMO attached in a conflicting mode."
);
create_exception!(
    _pmo,
    PoolFull,
    Error,
    "The pool has no room (space or namespace slots)."
);
create_exception!(
    _pmo,
    ReadOnly,
    Error,
    "A write to a PMO attached read-only."
);
create_exception!(
    _pmo,
    InvalidArgument,
    Error,
    "A bad argument (name, size, scheme, range)."
);
create_exception!(
    _pmo,
    NotAPool,
    Error,
    "The file is not a pmo pool (or is too new)."
);
create_exception!(
    _pmo,
    Unsupported,
    Error,
    "Not supported here (scheme, pool version, OS)."
);
create_exception!(
    _pmo,
    PinLimit,
    Error,
    "Readers beside the writer pin more old page versions than PMO_PIN_PAGES allows: the psync was refused before it wrote anything (refresh or detach the oldest reader)."
);
create_exception!(
    _pmo,
    Poisoned,
    Error,
    "The pool is unusable after a persistence failure."
);
create_exception!(
    _pmo,
    MediumError,
    Error,
    "An I/O or OS error on the medium."
);
create_exception!(
    _pmo,
    IntegrityError,
    Error,
    "The medium does not hold what pmo wrote: corruption or tampering (CLI exit code 2)."
);

/// The exception for a store error, its message prefixed by `context` (as the CLI does for
/// the pool path) when given.
pub fn to_py(e: StoreError, context: Option<&str>) -> PyErr {
    let msg = match context {
        // The sentence names the path already: no prefix, word for word the CLI's line.
        Some(c) if !matches!(e, StoreError::NoPool { .. }) => format!("{c}: {e}"),
        _ => e.to_string(),
    };
    match e {
        StoreError::NoPool { .. } => PoolNotFound::new_err(msg),
        StoreError::WrongKey(_) => WrongKey::new_err(msg),
        StoreError::NotFound(_) => NotFound::new_err(msg),
        StoreError::Exists(_) | StoreError::PoolExists(_) => Exists::new_err(msg),
        StoreError::NoSpace(_) => PoolFull::new_err(msg),
        StoreError::PinLimit { .. } => PinLimit::new_err(msg),
        StoreError::Busy { .. } | StoreError::AddressInUse { .. } => Busy::new_err(msg),
        StoreError::ReadOnly(_) => ReadOnly::new_err(msg),
        StoreError::Invalid(_) => InvalidArgument::new_err(msg),
        StoreError::NotAPool(_) => NotAPool::new_err(msg),
        StoreError::Unsupported(_) => Unsupported::new_err(msg),
        StoreError::Poisoned => Poisoned::new_err(msg),
        e if e.is_integrity() => IntegrityError::new_err(msg),
        _ => MediumError::new_err(msg),
    }
}

/// `Result<T, StoreError>` into `PyResult<T>`.
pub trait IntoPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for pmo_store::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(|e| to_py(e, None))
    }
}

/// Register the exceptions in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("WrongKey", py.get_type::<WrongKey>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("PoolNotFound", py.get_type::<PoolNotFound>())?;
    m.add("Exists", py.get_type::<Exists>())?;
    m.add("Busy", py.get_type::<Busy>())?;
    m.add("PoolFull", py.get_type::<PoolFull>())?;
    m.add("PinLimit", py.get_type::<PinLimit>())?;
    m.add("ReadOnly", py.get_type::<ReadOnly>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("NotAPool", py.get_type::<NotAPool>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    m.add("Poisoned", py.get_type::<Poisoned>())?;
    m.add("MediumError", py.get_type::<MediumError>())?;
    m.add("IntegrityError", py.get_type::<IntegrityError>())?;
    Ok(())
}
