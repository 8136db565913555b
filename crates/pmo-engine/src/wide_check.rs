//! The 16-bit wide check of page-map entries (format version 4): sealing the entries that
//! lack it (the upgrade) and finding those whose check damage zeroed (`pmo check`).

use pmo_format::layout::PageMapEntry;
use pmo_medium::Medium;
use pmo_meta::error::Result;

use crate::engine::PmoCore;

impl PmoCore {
    /// The page-map entries that read (their narrow check holds) but lack the wide check,
    /// with their indices.
    fn entries_without_wide_check(&self, m: &dyn Medium) -> Result<Vec<(u64, PageMapEntry)>> {
        let mut map = vec![0u8; (self.layout.npages * 8) as usize];
        m.read(self.abs(self.layout.map_off), &mut map)?;
        Ok(map
            .chunks_exact(8)
            .map(|c| PageMapEntry(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .enumerate()
            .filter(|(_, e)| !e.has_wide_check() && e.loc().is_some())
            .map(|(i, e)| (i as u64, e))
            .collect())
    }

    /// Give every page-map entry that lacks the wide check its check (the version-4 upgrade):
    /// written in place and flushed, not fenced (the caller fences). Returns how many.
    pub fn seal_map_entries(&self, m: &dyn Medium) -> Result<u64> {
        let mut sealed = 0;
        for (i, e) in self.entries_without_wide_check(m)? {
            if let Some(new) = e.resealed() {
                let at = self.abs(self.layout.map_entry(i));
                m.write(at, &new.0.to_le_bytes())?;
                m.flush(at, 8)?;
                sealed += 1;
            }
        }
        Ok(sealed)
    }

    /// In a version-4 pool every entry carries the wide check; one that does not had its check
    /// field zeroed by damage (it still reads under its narrow check): `pmo check` says so.
    pub fn map_check_problems(&self, m: &dyn Medium) -> Result<Option<String>> {
        let n = self.entries_without_wide_check(m)?.len();
        Ok((n > 0).then(|| {
            format!(
                "PMO '{}': {n} page-map entries lack their 16-bit check (damaged; they still read under their 4-bit check)",
                self.name
            )
        }))
    }
}
