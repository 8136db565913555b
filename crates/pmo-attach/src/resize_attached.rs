//! Resize of an attached PMO (`docs/lifecycle.md`, "Resize"): [`Attachment::grow`] grows a
//! writer's view in place within its layout capacity; [`Attachment::resize`] otherwise detaches,
//! resizes (`pmo_life::resize`) and attaches again at the same address.

use pmo_format::{align_up, PmoLayout, PAGE_SIZE};
use pmo_meta::keys;
use pmo_meta::redundancy::not_found;

use crate::attach::{AttachOptions, Attachment};
use pmo_life::resize::{
    no_room, resize, resize_in_place, shrink_over_data, ResizeOptions, ResizeReport,
};
use pmo_meta::error::{Result, StoreError};
use pmo_pool::pool::Perm;

/// A failed [`Attachment::resize`]: the error, and the attachment back when there is one (the
/// PMO as it was: still attached when the failure came before the detach, else attached again
/// at its old size; `None` if that attach failed too).
pub struct ResizeAttachedError {
    pub error: StoreError,
    pub attachment: Option<Attachment>,
}

impl std::fmt::Debug for ResizeAttachedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (still attached: {})",
            self.error,
            self.attachment.is_some()
        )
    }
}

impl Attachment {
    /// Grow the PMO this writer has attached to `new_size` bytes (rounded up to pages) in
    /// place, without detaching: within the PMO's layout capacity ([`Attachment::mapped_len`],
    /// which the writer's view maps whole), only metadata changes. The address stays, the
    /// changes not yet psynced stay (they are committed by the next psync as usual), and the
    /// new pages read as zeros (any stale page of the mapping past the old size is dropped).
    /// Other threads may go on using the bytes below the old size meanwhile; a psync waits.
    /// Refused (nothing changed): a size below the current one or past the capacity
    /// (`Invalid`; [`Attachment::resize`] moves the PMO), a wrong key, a relocated view or
    /// a taken address range (`AddressInUse`).
    pub fn grow(&self, new_size: u64, key: &[u8]) -> Result<ResizeReport> {
        if self.perm() != Perm::Write {
            return Err(StoreError::ReadOnly(self.name().into()));
        }
        let new_size = align_up(new_size, PAGE_SIZE)
            .ok_or_else(|| StoreError::Invalid(format!("invalid PMO size {new_size}")))?;
        let old_size = self.len() as u64;
        if new_size < old_size || new_size > self.mapped_len() as u64 {
            return Err(StoreError::Invalid(format!(
                "PMO '{}' grows in place from {old_size} bytes up to its capacity of {} bytes, \
                 not to {new_size} (a resize that moves it detaches: `Attachment::resize`)",
                self.name(),
                self.mapped_len()
            )));
        }
        let pool = self.handle().pool().clone();
        let _serial = self.psync_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (_meta, ns) = pool.begin_ns_change()?;
        let old = ns
            .find(self.name())
            .map(|(_, e)| e.clone())
            .filter(|e| e.uuid == self.handle().core.uuid)
            .ok_or_else(|| not_found(&ns, self.name()))?;
        drop(ns);
        keys::check_key(&old, key)?;
        if pool.readers_of(&self.handle().core)?.0 > 0 {
            return Err(StoreError::Busy {
                name: old.name.clone(),
                how: "read-only by readers beside its writer (detach them first)",
            });
        }
        if self.relocated() {
            return Err(StoreError::AddressInUse {
                name: old.name.clone(),
                addr: old.base_addr,
                len: new_size,
            });
        }
        let mut report = ResizeReport::in_place(pool.info_of(&old), old_size);
        if new_size == old_size {
            return Ok(report);
        }
        // Stores past the old size (outside the PMO) must not show up as its new pages.
        for p in old_size / PAGE_SIZE..new_size / PAGE_SIZE {
            if self.view().is_present(p) {
                self.view()
                    .discard(p)
                    .map_err(|e| StoreError::Os(e.to_string()))?;
            }
        }
        resize_in_place(&pool, self.handle(), &old, new_size, key, true)?;
        self.handle().core.set_size(new_size);
        self.len
            .store(new_size as usize, std::sync::atomic::Ordering::Release);
        report.info = pool.info(self.name())?;
        Ok(report)
    }

    /// Grow or shrink the PMO this writer has attached, and go on at the same address: a grow
    /// within the capacity is [`Attachment::grow`] (nothing detached); otherwise psync,
    /// check (a shrink over data without `force`, a pool without room: refused while still
    /// attached), detach, `Pool::resize`, attach again with `attach`. The stable address is
    /// kept whenever the grown range is free (always up to `ADDRESS_HEADROOM` times the size
    /// the PMO was created with), so pointers into the PMO stay valid; check
    /// [`ResizeReport::address_kept`] when growing further. No other thread may touch the
    /// mapping during the call (as for a detach): the range is unmapped and mapped again, and
    /// the pages fault back in from the medium. Another process may attach the PMO in the
    /// moment between the detach and the resize: then the resize fails with `Busy`.
    pub fn resize(
        self,
        new_size: u64,
        key: &[u8],
        attach: AttachOptions,
        force: bool,
    ) -> std::result::Result<(Attachment, ResizeReport), Box<ResizeAttachedError>> {
        let keep = |a: Attachment, error: StoreError| {
            Box::new(ResizeAttachedError {
                error,
                attachment: Some(a),
            })
        };
        if self.perm() != Perm::Write {
            let e = StoreError::ReadOnly(self.name().into());
            return Err(keep(self, e));
        }
        let grows_in_place = align_up(new_size, PAGE_SIZE).is_some_and(|s| {
            s >= self.len() as u64 && s <= self.mapped_len() as u64 && !self.relocated()
        });
        if grows_in_place {
            return match self.grow(new_size, key) {
                Ok(r) => Ok((self, r)),
                Err(e) => Err(keep(self, e)),
            };
        }
        if let Err(e) = self.psync() {
            return Err(keep(self, e));
        }
        if let Err(e) = self.resize_precheck(new_size, force) {
            return Err(keep(self, e));
        }
        let pool = self.handle().pool().clone();
        let name = self.name().to_string();
        drop(self);
        let opts = ResizeOptions {
            force,
            progress: None,
        };
        match resize(&pool, &name, new_size, key, opts) {
            Ok(report) => {
                match crate::attach::attach_with(&pool, &name, Perm::Write, key, attach) {
                    Ok(a) => Ok((a, report)),
                    Err(error) => Err(Box::new(ResizeAttachedError {
                        error,
                        attachment: None,
                    })),
                }
            }
            Err(error) => Err(Box::new(ResizeAttachedError {
                error,
                attachment: crate::attach::attach_with(&pool, &name, Perm::Write, key, attach).ok(),
            })),
        }
    }

    /// What [`Attachment::resize`] can refuse before it detaches: a size of 0, a shrink over
    /// data without `force` (read from the mapping, psynced), no free extent of the new size.
    fn resize_precheck(&self, new_size: u64, force: bool) -> Result<()> {
        let new_size = align_up(new_size, PAGE_SIZE)
            .filter(|&s| s > 0)
            .ok_or_else(|| StoreError::Invalid(format!("invalid PMO size {new_size}")))?;
        let old_n = self.len() as u64 / PAGE_SIZE;
        let new_n = new_size / PAGE_SIZE;
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for p in new_n..old_n {
            self.read_at((p * PAGE_SIZE) as usize, &mut page)?;
            if !force && page.iter().any(|&b| b != 0) {
                return Err(shrink_over_data(self.name(), new_size, p));
            }
        }
        let h = self.handle();
        let scheme = h.scheme();
        let layout = PmoLayout::with_plain(
            new_n,
            scheme.tag_bytes() as u64,
            scheme.shadow == pmo_meta::scheme::Shadow::Medium,
        )
        .and_then(|l| l.with_log(h.core.layout.log_off.is_some()))
        .ok_or_else(|| StoreError::Invalid("PMO size too large".into()))?;
        let largest = h.pool().pool_info()?.largest_free;
        if new_n != old_n && largest < layout.extent_len {
            return Err(no_room(self.name(), new_size, layout.extent_len, largest));
        }
        Ok(())
    }
}
