//! The whole-PMO checksum (`wedi`) over a fully populated view: an attach verifies it, and so
//! does a reader's refresh.
#![allow(unsafe_code)] // reading a populated view's pages in place.

use std::sync::Arc;

use pmo_os::view::{View, PAGE_SIZE};
use pmo_pool::handle::PmoHandle;

/// The protection whose whole-PMO checksum (`wedi`) an attach verifies: the handle's, or a
/// reader's snapshot's.
pub(crate) fn whole_checksum_of(
    handle: &PmoHandle,
) -> Option<Arc<pmo_engine::protect::Protection>> {
    let prot = match handle.reader() {
        Some(r) => r.snapshot().protection().cloned(),
        None => handle.protection().cloned(),
    };
    prot.filter(|p| p.keeps_whole_checksum())
}

/// Every page of a fully populated view, in order (whole-PMO checksums).
pub(crate) fn view_pages(view: &View) -> impl Iterator<Item = &[u8; PAGE_SIZE]> + '_ {
    let base = view.addr();
    (0..view.pages() as usize).map(move |p| {
        // SAFETY: the page is inside the live mapping and present (populated, never discarded
        // by this module); it is only read, and the view outlives the iterator.
        unsafe { &*(base.add(p * PAGE_SIZE) as *const [u8; PAGE_SIZE]) }
    })
}
