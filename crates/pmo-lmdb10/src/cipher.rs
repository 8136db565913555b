//! The page cipher LMDB 1.0 calls (`MDB_enc_func`): AES-256-GCM from AWS-LC, 16-byte tags, and
//! the key it uses, derived from a passphrase with Argon2id (the project's KDF, as pmo-meta).
//!
//! What LMDB hands the callback (`mdb_page_encrypt`, `mdb_rpage_decrypt` in mdb.c): `src` and
//! `dst` are a page (or an overflow run) less its first 16 bytes and less the tag's room;
//! `key[1]` is those first 16 bytes, the page number and the transaction id that wrote it, kept in
//! the clear; `key[2]` is the 16-byte tag's room after the data. The nonce is the page number's
//! low 32 bits and the 64-bit transaction id (12 bytes); the 16 bytes are also the associated
//! data, so a page moved to another number or stamped with another transaction id fails to open.
//! Page numbers of 2^32 and above (maps beyond 16 TiB) are refused, never truncated into a
//! repeated nonce. LMDB's meta pages (0 and 1) are not encrypted: LMDB's own design.
//!
//! `key[0]` is not key bytes: LMDB keeps a copy of it for the environment's life and frees it
//! without wiping, so it gets the address of a `PageCipher` (an initialised AWS-LC context,
//! cleansed when dropped) and the raw key never reaches LMDB's memory.
#![allow(unsafe_code)] // Reason: a C callback over LMDB's pointers, and AWS-LC's C API.

use std::ffi::c_int;
use std::path::Path;

use aws_lc_sys as sys;
use zeroize::Zeroizing;

use crate::ffi::MDB_val;
use crate::Lmdb10Error;

/// GCM tag bytes stored per page (LMDB's `size` argument of `mdb_env_set_encrypt`).
pub const TAG_LEN: usize = 16;
const NONCE_LEN: usize = 12;
/// What LMDB passes as the IV: `pgno_t` + `txnid_t`.
const IV_LEN: usize = 16;

/// Argon2id's parameters (version 0x13, 32 + 32 bytes out: the page key and a key verifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdfParams {
    pub m_kib: u32,
    pub t: u32,
    pub p: u32,
}

impl KdfParams {
    /// The store's default (pmo-format's `KdfParams::DEFAULT`, OWASP's minimum): 19 MiB, 2, 1.
    pub const DEFAULT: KdfParams = KdfParams {
        m_kib: 19 * 1024,
        t: 2,
        p: 1,
    };
    /// Cheap parameters for tests and throwaway environments (NOT for real keys).
    pub const INSECURE_FAST: KdfParams = KdfParams {
        m_kib: 64,
        t: 1,
        p: 1,
    };
}

/// The file beside `data.mdb` holding the KDF's salt and parameters and the key verifier.
pub const KDF_FILE: &str = "pmo-lmdb10.kdf";
const KDF_MAGIC: &[u8; 16] = b"pmo-lmdb10-kdf1\0";
const KDF_LEN: usize = 16 + 12 + 32 + 32;

/// Derive the page key for the environment in `dir`: Argon2id over the passphrase with the salt
/// of `dir`'s KDF file, made (with `params` and a fresh random salt) when `create` and absent.
/// A verifier in the file tells a wrong passphrase apart from a damaged page.
pub(crate) fn derive(
    dir: &Path,
    passphrase: &[u8],
    params: KdfParams,
    create: bool,
) -> Result<Zeroizing<[u8; 32]>, Lmdb10Error> {
    let path = dir.join(KDF_FILE);
    let io = |op: &'static str| {
        let path = path.clone();
        move |source| Lmdb10Error::Io { op, path, source }
    };
    let (salt, params, verifier) = match std::fs::read(&path) {
        Ok(b) => {
            if b.len() != KDF_LEN || &b[..16] != KDF_MAGIC {
                return Err(Lmdb10Error::Kdf(format!(
                    "{} is not a KDF file",
                    path.display()
                )));
            }
            let u = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
            let p = KdfParams {
                m_kib: u(16),
                t: u(20),
                p: u(24),
            };
            let salt: [u8; 32] = b[28..60].try_into().expect("32 bytes");
            let ver: [u8; 32] = b[60..92].try_into().expect("32 bytes");
            (salt, p, Some(ver))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let mut salt = [0u8; 32];
            aws_lc_rs::rand::fill(&mut salt).map_err(|_| Lmdb10Error::Crypto("random salt"))?;
            (salt, params, None)
        }
        Err(e) => return Err(io("read")(e)),
    };
    let argon = argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon2::Params::new(params.m_kib, params.t, params.p, Some(64))
            .map_err(|e| Lmdb10Error::Kdf(format!("parameters: {e}")))?,
    );
    let mut out = Zeroizing::new([0u8; 64]);
    argon
        .hash_password_into(passphrase, &salt, out.as_mut())
        .map_err(|e| Lmdb10Error::Kdf(e.to_string()))?;
    let mut key = Zeroizing::new([0u8; 32]);
    key.copy_from_slice(&out[..32]);
    match verifier {
        // Not secret-dependent timing that matters here: the verifier is public.
        Some(v) if v[..] != out[32..] => return Err(Lmdb10Error::WrongKey(dir.to_path_buf())),
        Some(_) => {}
        None => {
            let mut b = Vec::with_capacity(KDF_LEN);
            b.extend_from_slice(KDF_MAGIC);
            for x in [params.m_kib, params.t, params.p] {
                b.extend_from_slice(&x.to_le_bytes());
            }
            b.extend_from_slice(&salt);
            b.extend_from_slice(&out[32..]);
            std::fs::write(&path, &b).map_err(io("write"))?;
        }
    }
    Ok(key)
}

/// An AES-256-GCM key on an initialised AWS-LC AEAD context (boxed: AWS-LC aligns its state
/// relative to the address, so it must not move; LMDB holds its address).
pub(crate) struct PageCipher {
    ctx: Box<sys::EVP_AEAD_CTX>,
}

// SAFETY: after `new` the context is only read (seal/open take a const context; AWS-LC's aead.h
// allows concurrent seal/open on one AES-256-GCM context); drop has exclusive access.
unsafe impl Send for PageCipher {}
// SAFETY: as above.
unsafe impl Sync for PageCipher {}

impl PageCipher {
    pub(crate) fn new(key: &[u8; 32]) -> Result<Box<PageCipher>, Lmdb10Error> {
        // SAFETY: EVP_AEAD_CTX is a plain C struct; all-zero is its "zeroed" state
        // (EVP_AEAD_CTX_zero does the same).
        let mut ctx: Box<sys::EVP_AEAD_CTX> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: a live zeroed context, 32 readable key bytes, no engine.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_init(
                &mut *ctx,
                sys::EVP_aead_aes_256_gcm(),
                key.as_ptr(),
                key.len(),
                TAG_LEN,
                std::ptr::null_mut(),
            )
        };
        if ok != 1 {
            // SAFETY: clears AWS-LC's thread error queue; no pointers.
            unsafe { sys::ERR_clear_error() };
            return Err(Lmdb10Error::Crypto("EVP_AEAD_CTX_init(aes-256-gcm)"));
        }
        Ok(Box::new(PageCipher { ctx }))
    }

    /// Seal (`enc`) or open `len` bytes from `src` into `dst`, the tag at `tag`.
    ///
    /// # Safety
    /// `src` and `dst` are valid for `len` bytes and either equal or not overlapping; `tag` is
    /// valid for [`TAG_LEN`] bytes (written when sealing).
    unsafe fn run(
        &self,
        enc: bool,
        iv: &[u8; IV_LEN],
        src: *const u8,
        dst: *mut u8,
        len: usize,
        tag: *mut u8,
    ) -> bool {
        let pgno = u64::from_ne_bytes(iv[..8].try_into().expect("8 bytes"));
        let Ok(pg32) = u32::try_from(pgno) else {
            return false;
        };
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..4].copy_from_slice(&pg32.to_le_bytes());
        nonce[4..].copy_from_slice(&iv[8..]);
        let ok = if enc {
            let mut tag_len = 0usize;
            // SAFETY: the caller's contract for src/dst/len/tag; nonce and aad are locals.
            unsafe {
                sys::EVP_AEAD_CTX_seal_scatter(
                    &*self.ctx,
                    dst,
                    tag,
                    &mut tag_len,
                    TAG_LEN,
                    nonce.as_ptr(),
                    NONCE_LEN,
                    src,
                    len,
                    std::ptr::null(),
                    0,
                    iv.as_ptr(),
                    IV_LEN,
                )
            }
        } else {
            // SAFETY: as above; the tag is only read.
            unsafe {
                sys::EVP_AEAD_CTX_open_gather(
                    &*self.ctx,
                    dst,
                    nonce.as_ptr(),
                    NONCE_LEN,
                    src,
                    len,
                    tag,
                    TAG_LEN,
                    iv.as_ptr(),
                    IV_LEN,
                )
            }
        };
        if ok != 1 {
            // SAFETY: clears AWS-LC's thread error queue; no pointers.
            unsafe { sys::ERR_clear_error() };
        }
        ok == 1
    }
}

impl Drop for PageCipher {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`; nothing uses it after drop (the environment that held
        // its address is closed first: `Env`'s field order). Cleanup cleanses the key schedule.
        unsafe { sys::EVP_AEAD_CTX_cleanup(&mut *self.ctx) };
    }
}

/// The key LMDB keeps (`key[0]`): the address of a live [`PageCipher`], as 8 bytes.
pub(crate) fn lmdb_key(c: &PageCipher) -> [u8; 8] {
    (c as *const PageCipher as usize as u64).to_ne_bytes()
}

/// LMDB's `MDB_enc_func`: returns 0 on success, 1 when the page fails to open (LMDB reports
/// `MDB_CRYPTO_FAIL`) or an argument is not what this cipher was set up for.
///
/// # Safety
/// Called by LMDB only, with `src`, `dst` and `key[0..3]` as `mdb_page_encrypt` and
/// `mdb_rpage_decrypt` build them, `key[0]` being [`lmdb_key`] of a live cipher.
pub(crate) unsafe extern "C" fn enc_func(
    src: *const MDB_val,
    dst: *mut MDB_val,
    key: *const MDB_val,
    encdec: c_int,
) -> c_int {
    // SAFETY: LMDB passes valid MDB_vals and an array of three keys.
    let (src, dst, k) = unsafe { (&*src, &*dst, std::slice::from_raw_parts(key, 3)) };
    if k[0].mv_size != 8 || k[1].mv_size != IV_LEN || k[2].mv_size != TAG_LEN {
        return 1;
    }
    if src.mv_size != dst.mv_size {
        return 1;
    }
    // SAFETY: key[0] holds 8 bytes (checked), the address of a live PageCipher (our contract).
    let cipher = unsafe {
        let mut a = [0u8; 8];
        std::ptr::copy_nonoverlapping(k[0].mv_data.cast::<u8>(), a.as_mut_ptr(), 8);
        &*(u64::from_ne_bytes(a) as usize as *const PageCipher)
    };
    let mut iv = [0u8; IV_LEN];
    // SAFETY: key[1] is the page's first 16 bytes (checked length).
    unsafe { std::ptr::copy_nonoverlapping(k[1].mv_data.cast::<u8>(), iv.as_mut_ptr(), IV_LEN) };
    // SAFETY: src/dst are LMDB's page buffers of mv_size bytes (the plaintext page and the
    // encrypted copy, distinct allocations), the tag room is TAG_LEN bytes after the data.
    let ok = unsafe {
        cipher.run(
            encdec == 1,
            &iv,
            src.mv_data.cast::<u8>(),
            dst.mv_data.cast::<u8>(),
            src.mv_size,
            k[2].mv_data.cast::<u8>(),
        )
    };
    c_int::from(!ok)
}
