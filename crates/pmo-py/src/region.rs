//! `pmo._pmo.Region`: the buffer exporter over an attached PMO's mapping.
//!
//! PyO3 offers `__getbuffer__` under the stable ABI only from Python 3.11, and the wheels are
//! `abi3-py39`. The buffer slots (`Py_bf_getbuffer`, `Py_bf_releasebuffer`) have been accepted
//! by `PyType_FromSpec` at run time since Python 3.9, so this type is built with the raw C
//! API: two slots, `PyBuffer_FillInfo` (exported by every CPython 3) and a pointer to shared
//! [`RegionState`]. The Python class `pmo.PmoObject` subclasses it, so `memoryview(obj)` and
//! `numpy.frombuffer(obj)` see the PMO's memory with no copy.
//!
//! Every buffer handed out is counted (under the GIL) in [`RegionState::exports`]; detach
//! refuses with `BufferError` while the count is not zero, and marks the state dead first, so
//! no buffer can be taken of an unmapped PMO.
#![allow(unsafe_code)] // a type built with the raw C API: its slots and its object layout.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// `Py_bf_getbuffer` and `Py_bf_releasebuffer` of CPython's `typeslots.h` (stable since 3.0).
const PY_BF_GETBUFFER: c_int = 1;
const PY_BF_RELEASEBUFFER: c_int = 2;

extern "C" {
    /// CPython's `PyBuffer_FillInfo` (public since 3.0, in the limited API from 3.11).
    fn PyBuffer_FillInfo(
        view: *mut c_void,
        obj: *mut ffi::PyObject,
        buf: *mut c_void,
        len: ffi::Py_ssize_t,
        readonly: c_int,
        flags: c_int,
    ) -> c_int;
}

/// What a region knows of its mapping; shared with the native `Attachment`.
pub struct RegionState {
    addr: usize,
    len: usize,
    writable: bool,
    /// Buffers handed out and not yet released.
    exports: AtomicUsize,
    /// False once detach has begun.
    live: AtomicBool,
    /// The attachment that maps `addr..addr + len`; `None` once detached. Owned here, not by
    /// the native `Attachment` alone: every bound `Region` holds this state, and every buffer
    /// holds its `Region`, so a mapping with buffers exported is never unmapped, even when
    /// Python code drops the native `Attachment` (its drop detaches only when no buffer is
    /// exported; otherwise the last `Region` to go does).
    pub attachment: RwLock<Option<pmo_store::Attachment>>,
}

impl RegionState {
    pub fn new(a: pmo_store::Attachment) -> RegionState {
        RegionState {
            addr: a.addr() as usize,
            len: a.len(),
            writable: a.perm() == pmo_store::Perm::Write,
            exports: AtomicUsize::new(0),
            live: AtomicBool::new(true),
            attachment: RwLock::new(Some(a)),
        }
    }
    /// Buffers still exported.
    pub fn exports(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }
    /// Refuse new buffers from now on (called under the GIL, after `exports()` was 0).
    pub fn retire(&self) {
        self.live.store(false, Ordering::Release);
    }
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }
}

/// The object layout: the header, then a strong reference (`Arc::into_raw`) or null.
#[repr(C)]
struct RegionObject {
    ob_base: ffi::PyObject,
    state: *const RegionState,
}

unsafe extern "C" fn getbuffer(obj: *mut ffi::PyObject, view: *mut c_void, flags: c_int) -> c_int {
    // SAFETY: CPython calls this slot with an instance of the type (or a subclass), whose
    // layout begins with `RegionObject`.
    let state = unsafe { (*(obj as *mut RegionObject)).state };
    // SAFETY: a non-null `state` is a strong reference held by the object until dealloc.
    let st = match unsafe { state.as_ref() } {
        Some(st) if st.is_live() => st,
        _ => {
            let msg = if state.is_null() {
                c"PMO object is not attached"
            } else {
                c"PMO is detached: its memory is no longer mapped"
            };
            // SAFETY: the GIL is held in a buffer slot; `view` points at a `Py_buffer`, whose
            // second field is `obj` (its layout is the same in every CPython 3), which must
            // be NULL on failure.
            unsafe {
                ffi::PyErr_SetString(ffi::PyExc_BufferError, msg.as_ptr());
                *(view as *mut *mut ffi::PyObject).add(1) = std::ptr::null_mut();
            }
            return -1;
        }
    };
    // SAFETY: `addr..addr + len` stays mapped while the region is live, and it stays live while
    // any buffer is exported (detach checks `exports` under the GIL). `PyBuffer_FillInfo`
    // takes a new reference to `obj` and refuses a writable request on a read-only region.
    let r = unsafe {
        PyBuffer_FillInfo(
            view,
            obj,
            st.addr as *mut c_void,
            st.len as ffi::Py_ssize_t,
            c_int::from(!st.writable),
            flags,
        )
    };
    if r == 0 {
        st.exports.fetch_add(1, Ordering::AcqRel);
    }
    r
}

unsafe extern "C" fn releasebuffer(obj: *mut ffi::PyObject, _view: *mut c_void) {
    // SAFETY: as in `getbuffer`; a buffer was exported, so `state` is set.
    let state = unsafe { (*(obj as *mut RegionObject)).state };
    // SAFETY: the object holds its reference until dealloc, which cannot run while a buffer
    // (holding a reference to the object) is alive.
    if let Some(st) = unsafe { state.as_ref() } {
        st.exports.fetch_sub(1, Ordering::AcqRel);
    }
}

unsafe extern "C" fn dealloc(obj: *mut ffi::PyObject) {
    // SAFETY: called once by CPython when the last reference goes; the layout is ours.
    unsafe {
        let state = (*(obj as *mut RegionObject)).state;
        if !state.is_null() {
            drop(Arc::from_raw(state));
        }
        let tp = ffi::Py_TYPE(obj);
        let free = ffi::PyType_GetSlot(tp, ffi::Py_tp_free);
        if !free.is_null() {
            let free: ffi::freefunc = std::mem::transmute(free);
            free(obj as *mut c_void);
        }
        // Instances of heap types hold a reference to their type.
        ffi::Py_DECREF(tp as *mut ffi::PyObject);
    }
}

/// Create the `Region` type (once, at module import).
pub fn region_type(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let mut slots = [
        ffi::PyType_Slot {
            slot: PY_BF_GETBUFFER,
            pfunc: getbuffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: PY_BF_RELEASEBUFFER,
            pfunc: releasebuffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_dealloc,
            pfunc: dealloc as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_new,
            pfunc: ffi::PyType_GenericNew as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc: c"The memory of an attached PMO, as a buffer (base of pmo.PmoObject).".as_ptr()
                as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: std::ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        name: c"pmo._pmo.Region".as_ptr(),
        basicsize: std::mem::size_of::<RegionObject>() as c_int,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_BASETYPE) as _,
        slots: slots.as_mut_ptr(),
    };
    // SAFETY: the spec and slots are valid for the call (CPython copies what it keeps; the
    // name and doc are static).
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(&mut spec)) }
}

/// Point `region` (an instance of the `Region` type, not yet bound) at `state`.
pub fn bind(
    region: &Bound<'_, PyAny>,
    region_type: &Bound<'_, PyAny>,
    state: &Arc<RegionState>,
) -> PyResult<()> {
    if !region.is_instance(region_type)? {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "expected a pmo._pmo.Region instance",
        ));
    }
    // SAFETY: checked above that the object has the `RegionObject` layout; the GIL serialises
    // this write with the buffer slots.
    let slot = unsafe { &mut (*(region.as_ptr() as *mut RegionObject)).state };
    if !slot.is_null() {
        return Err(PyBufferError::new_err("this PMO object is already bound"));
    }
    *slot = Arc::into_raw(Arc::clone(state));
    Ok(())
}
