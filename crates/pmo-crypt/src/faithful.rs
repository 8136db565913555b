//! Faithful mode: the LOaPP reference kernel's page protection, for reproducing the paper.
//!
//! - Encryption: AES-256-XTS per page, tweak = page index (u64 little-endian in the first 8 bytes
//!   of the 16-byte tweak, the rest zero: dm-crypt's `plain64`).
//! - Per-page integrity (`BP/I_p`, `BP/I_d`, `SP/I_*`): an unkeyed SHA-256 of the page's
//!   *plaintext*, kept in a checksum region (paper V-D).
//! - Whole-PMO integrity (`wedi`, the paper's WED/I_p): one SHA-256 over the plaintext of every
//!   page in index order, computed after decryption at attach and recomputed at psync (paper V-A).
//!
//! Known weaknesses, on purpose (they are what the paper does; `tests/tamper.rs` asserts them):
//! the checksum is unkeyed and has no version, so an older (ciphertext, checksum) pair put back
//! is accepted (rollback); with one XTS key for several PMOs (the kernel keys with the user's key)
//! a page transplanted to the same index of another PMO is accepted; and the plaintext checksum
//! stored in the clear lets anyone confirm a guess of a page's content. The secure mode
//! ([`crate::seal_page`]) has none of these.
//!
//! Invariant: the page functions do not allocate.

use crate::error::CryptError;
use crate::ffi::{XtsKey, XTS_KEY_LEN};
use crate::keys::{label, MasterKey, Uuid};
use crate::{Page, PAGE_SIZE};
use aws_lc_rs::{constant_time, digest};
use zeroize::Zeroizing;

/// A 32-byte SHA-256 checksum of a page's (or a whole PMO's) plaintext.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PageChecksum(pub [u8; 32]);

/// The faithful mode's key: one AES-256-XTS key pair per PMO, derived once per attach.
pub struct FaithfulKeys {
    xts: XtsKey,
}

impl FaithfulKeys {
    /// Derive the XTS key pair of PMO `pmo_uuid` in pool `pool_uuid` from the master key.
    pub fn derive(master: &MasterKey, pool_uuid: Uuid, pmo_uuid: Uuid) -> Result<Self, CryptError> {
        let mut key = Zeroizing::new([0u8; XTS_KEY_LEN]);
        master.expand(label::FAITHFUL_XTS, &pool_uuid, &pmo_uuid, &mut key[..])?;
        Ok(Self {
            xts: XtsKey::new(&key)?,
        })
    }

    /// Use the 64-byte key pair as given, like the reference kernel keying XTS with the user's key
    /// directly (the same key for every PMO of that key). For paper reproduction and tests.
    pub fn from_raw_xts_key(key: &[u8; 64]) -> Result<Self, CryptError> {
        Ok(Self {
            xts: XtsKey::new(key)?,
        })
    }

    /// Encrypt a page with tweak = `page_index`.
    pub fn encrypt_page(
        &self,
        page_index: u64,
        plaintext: &Page,
        out: &mut Page,
    ) -> Result<(), CryptError> {
        self.xts.run(
            true,
            &tweak(page_index),
            plaintext.as_ptr(),
            out.as_mut_ptr(),
            PAGE_SIZE,
        )
    }

    /// Decrypt a page with tweak = `page_index`. XTS has no integrity: a wrong key or tampered
    /// data decrypts to garbage; verify with [`page_checksum`].
    pub fn decrypt_page(
        &self,
        page_index: u64,
        ciphertext: &Page,
        out: &mut Page,
    ) -> Result<(), CryptError> {
        self.xts.run(
            false,
            &tweak(page_index),
            ciphertext.as_ptr(),
            out.as_mut_ptr(),
            PAGE_SIZE,
        )
    }

    /// [`Self::encrypt_page`] in place.
    pub fn encrypt_page_in_place(
        &self,
        page_index: u64,
        page: &mut Page,
    ) -> Result<(), CryptError> {
        let p = page.as_mut_ptr();
        self.xts.run(true, &tweak(page_index), p, p, PAGE_SIZE)
    }

    /// [`Self::decrypt_page`] in place.
    pub fn decrypt_page_in_place(
        &self,
        page_index: u64,
        page: &mut Page,
    ) -> Result<(), CryptError> {
        let p = page.as_mut_ptr();
        self.xts.run(false, &tweak(page_index), p, p, PAGE_SIZE)
    }

    /// Decrypt, then check the plaintext against its stored checksum (the fault path of the
    /// paper's I designs). On mismatch `out` is zeroed and [`CryptError::Integrity`] returned.
    pub fn decrypt_and_verify(
        &self,
        page_index: u64,
        ciphertext: &Page,
        stored: &PageChecksum,
        out: &mut Page,
    ) -> Result<(), CryptError> {
        self.decrypt_page(page_index, ciphertext, out)?;
        let result = verify_page_checksum(out, stored);
        if result.is_err() {
            zeroize::Zeroize::zeroize(out);
        }
        result
    }
}

impl std::fmt::Debug for FaithfulKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaithfulKeys(<redacted>)")
    }
}

fn tweak(page_index: u64) -> [u8; 16] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&page_index.to_le_bytes());
    t
}

/// SHA-256 of a page's plaintext (unkeyed, as the reference kernel).
pub fn page_checksum(plaintext: &Page) -> PageChecksum {
    let d = digest::digest(&digest::SHA256, plaintext);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    PageChecksum(out)
}

/// Compare a page's checksum with the stored one (constant time).
pub fn verify_page_checksum(plaintext: &Page, stored: &PageChecksum) -> Result<(), CryptError> {
    let actual = page_checksum(plaintext);
    constant_time::verify_slices_are_equal(&actual.0, &stored.0).map_err(|_| CryptError::Integrity)
}

/// Streaming SHA-256 over a whole PMO's plaintext, page by page in index order (`wedi`).
pub struct WholePmoChecksum {
    ctx: digest::Context,
    pages: u64,
}

impl WholePmoChecksum {
    /// Start an empty checksum.
    pub fn new() -> Self {
        Self {
            ctx: digest::Context::new(&digest::SHA256),
            pages: 0,
        }
    }

    /// Add the next page (pages must come in index order, each exactly once).
    pub fn update_page(&mut self, plaintext: &Page) {
        self.ctx.update(plaintext);
        self.pages += 1;
    }

    /// Pages added so far.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// The checksum of all pages added.
    pub fn finish(self) -> PageChecksum {
        let d = self.ctx.finish();
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        PageChecksum(out)
    }

    /// Checksum of a whole PMO given as consecutive pages.
    pub fn of_pages<'a>(pages: impl IntoIterator<Item = &'a Page>) -> PageChecksum {
        let mut c = Self::new();
        for p in pages {
            c.update_page(p);
        }
        c.finish()
    }

    /// Compare with the stored whole-PMO checksum (constant time).
    pub fn verify(self, stored: &PageChecksum) -> Result<(), CryptError> {
        let actual = self.finish();
        constant_time::verify_slices_are_equal(&actual.0, &stored.0)
            .map_err(|_| CryptError::Integrity)
    }
}

impl Default for WholePmoChecksum {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_known_answer() {
        // SHA-256 of 4096 zero bytes.
        let z = [0u8; PAGE_SIZE];
        let hex: String = page_checksum(&z)
            .0
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "ad7facb2586fc6e966c004d7d1d16b024f5805ff7cb47c7a85dabd8b48892ca7"
        );
    }

    #[test]
    fn xts_round_trip_in_and_out_of_place() {
        let k = FaithfulKeys::derive(&MasterKey::from_bytes([4; 32]), [1; 16], [2; 16]).unwrap();
        let pt: Page = core::array::from_fn(|i| (i * 13 % 256) as u8);
        let mut ct = [0u8; PAGE_SIZE];
        k.encrypt_page(5, &pt, &mut ct).unwrap();
        let mut ip = pt;
        k.encrypt_page_in_place(5, &mut ip).unwrap();
        assert_eq!(ip, ct);
        let sum = page_checksum(&pt);
        let mut out = [0u8; PAGE_SIZE];
        k.decrypt_and_verify(5, &ct, &sum, &mut out).unwrap();
        assert_eq!(out, pt);
        k.decrypt_page_in_place(5, &mut ip).unwrap();
        assert_eq!(ip, pt);
    }

    #[test]
    fn whole_pmo_checksum_is_sha256_of_concatenation() {
        let a = [1u8; PAGE_SIZE];
        let b = [2u8; PAGE_SIZE];
        let mut cat = Vec::with_capacity(2 * PAGE_SIZE);
        cat.extend_from_slice(&a);
        cat.extend_from_slice(&b);
        let d = digest::digest(&digest::SHA256, &cat);
        let whole = WholePmoChecksum::of_pages([&a, &b]);
        assert_eq!(&whole.0[..], d.as_ref());
        let mut c = WholePmoChecksum::new();
        c.update_page(&b);
        c.update_page(&a);
        assert_eq!(
            c.verify(&whole),
            Err(CryptError::Integrity),
            "order matters"
        );
    }
}

#[cfg(test)]
mod cross_check {
    use super::*;
    use aes::cipher::KeyInit;
    use aes::Aes256;
    use xts_mode::{get_tweak_default, Xts128};

    /// AWS-LC's XTS with our tweak encoding equals RustCrypto's `xts-mode` with the standard
    /// little-endian sector-number tweak (IEEE 1619 data-unit sequence number).
    #[test]
    fn xts_matches_rustcrypto_xts_mode() {
        let key: [u8; 64] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(1));
        let ours = FaithfulKeys::from_raw_xts_key(&key).unwrap();
        let theirs = Xts128::<Aes256>::new(
            Aes256::new_from_slice(&key[..32]).unwrap(),
            Aes256::new_from_slice(&key[32..]).unwrap(),
        );
        for index in [0u64, 1, 255, 0x1_0000_0001, u64::MAX] {
            let pt: Page = core::array::from_fn(|i| (i as u8) ^ (index as u8));
            let mut a = [0u8; PAGE_SIZE];
            ours.encrypt_page(index, &pt, &mut a).unwrap();
            let mut b = pt;
            theirs.encrypt_sector(&mut b, get_tweak_default(u128::from(index)));
            assert_eq!(a, b, "page index {index}");
        }
    }
}
