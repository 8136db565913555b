//! The plaintext area of a PMO whose shadow lives on the medium (`docs/format.md` §4, the
//! `Shadow::Medium` placement): its word, and scrubbing the plaintext a session left.

use pmo_format::layout::{PageLoc, PmoLayout};
use pmo_format::PAGE_SIZE;
use pmo_medium::Medium;
use pmo_meta::error::Result;

use crate::engine::PmoCore;

impl PmoCore {
    // The plaintext area of a PMO whose shadow lives on the medium (`docs/format.md` §4): the
    // plaintext word is set and fenced before an attach writes the area, and cleared (fenced)
    // only after the pages it wrote are zeroed and fenced. So after any crash a set word covers
    // every page that may hold plaintext.

    /// Whether the plaintext word is set (always false without a plaintext area).
    pub fn plain_marked(&self, m: &dyn Medium) -> Result<bool> {
        if self.layout.plain_off.is_none() {
            return Ok(false);
        }
        let mut b = [0u8; 8];
        m.read(self.abs(PmoLayout::PLAIN_WORD_OFF), &mut b)?;
        Ok(u64::from_le_bytes(b) != 0)
    }

    fn write_plain_word(&self, m: &dyn Medium, v: u64) -> Result<()> {
        let off = self.abs(PmoLayout::PLAIN_WORD_OFF);
        m.write(off, &v.to_le_bytes())?;
        m.persist(off, 8)?;
        Ok(())
    }

    /// Set the plaintext word, durably, before the plaintext area is written.
    pub fn mark_plain(&self, m: &dyn Medium) -> Result<()> {
        self.write_plain_word(m, 1)
    }

    /// Clear the plaintext word, durably: no plaintext is left (the caller zeroed and fenced it).
    pub fn clear_plain_word(&self, m: &dyn Medium) -> Result<()> {
        self.write_plain_word(m, 0)
    }

    /// Zero `pages` of the plaintext area (`None`: all of it), fence, then clear the plaintext
    /// word. A crash inside leaves the word set, and the next recovery zeroes the whole area
    /// again (idempotent).
    pub fn scrub_plain(&self, m: &dyn Medium, pages: Option<&[u64]>) -> Result<()> {
        let Some(base) = self.layout.plain_off else {
            return Ok(());
        };
        let zero = |p: u64| -> Result<()> {
            let off = self.abs(base + p * PAGE_SIZE);
            m.zero(off, PAGE_SIZE)?;
            m.flush(off, PAGE_SIZE)?;
            Ok(())
        };
        match pages {
            Some(list) => list
                .iter()
                .filter(|&&p| p < self.layout.npages)
                .try_for_each(|&p| zero(p))?,
            None => (0..self.layout.npages).try_for_each(zero)?,
        }
        m.fence()?;
        self.clear_plain_word(m)
    }

    /// The crash handler of the plaintext area, which needs no key: if the plaintext word is
    /// set, zero the whole area and every slot no page-map entry names (plaintext a BP psync
    /// left behind), fence, and clear the word unless pages are still committed as plaintext
    /// (BP on the medium: only a keyed open can encrypt them).
    pub fn scrub_if_marked(&self, m: &dyn Medium) -> Result<()> {
        self.scrub_marked(m, false)
    }

    /// Before the extent is given back (pdestroy): the crash handler, and the slots of pages
    /// still committed as plaintext are zeroed too, so the word is always cleared.
    pub fn scrub_for_destroy(&self, m: &dyn Medium) -> Result<()> {
        self.scrub_marked(m, true)
    }

    fn scrub_marked(&self, m: &dyn Medium, destroy: bool) -> Result<()> {
        if !self.plain_marked(m)? {
            return Ok(());
        }
        let Some(base) = self.layout.plain_off else {
            return Ok(());
        };
        let zero = |off: u64| -> Result<()> {
            m.zero(off, PAGE_SIZE)?;
            m.flush(off, PAGE_SIZE)?;
            Ok(())
        };
        let mut committed_plain = 0u64;
        for p in 0..self.layout.npages {
            zero(self.abs(base + p * PAGE_SIZE))?;
            let e = self.map_entry(m, p)?;
            // The slot that stays: the current one, unless it holds plaintext being destroyed.
            let keep = if destroy && e.is_plain() {
                None
            } else {
                e.loc()
            };
            committed_plain += u64::from(keep.is_some() && e.is_plain());
            for s in 0..2u8 {
                if keep != Some(PageLoc::Slot(s)) {
                    zero(self.abs(self.layout.page(s, p)))?;
                }
            }
        }
        m.fence()?;
        if committed_plain == 0 {
            self.clear_plain_word(m)?;
        }
        Ok(())
    }

    /// Pages whose committed copy is plaintext (BP on the medium, a session that did not
    /// reach its detach).
    pub fn plain_committed(&self, m: &dyn Medium) -> Result<u64> {
        if self.layout.plain_off.is_none() {
            return Ok(0);
        }
        let mut n = 0;
        for p in 0..self.layout.npages {
            n += u64::from(self.map_entry(m, p)?.is_plain());
        }
        Ok(n)
    }
}
