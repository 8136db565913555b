//! Floors measured alone, for the benchmarks that print a figure beside its floor (`schemes`,
//! and its small sessions): one page operation of the default `secure` scheme's AEAD
//! ([`AEAD`]: AEGIS-256X4 since issue 30), one persisted page.

use std::path::Path;
use std::time::Instant;

use pmo_medium::{Medium, MediumKind};

use crate::{median, BenchError};

const PAGE: usize = 4096;

/// The AEAD the crypto floors time: the default `secure` scheme's, which the benchmarks' secure
/// figures measure.
pub(crate) const AEAD: pmo_crypt::AeadCipher = pmo_store::Scheme::SECURE.aead;

/// [`AEAD`]'s name in records and tables (`aegis`, `aes-gcm`).
pub(crate) fn aead_name() -> &'static str {
    match AEAD {
        pmo_crypt::AeadCipher::Aes256Gcm => "aes-gcm",
        pmo_crypt::AeadCipher::Aegis256X4 => "aegis",
    }
}

/// The page keys the crypto floors use ([`AEAD`] as the page AEAD).
pub(crate) fn page_keys() -> Option<pmo_crypt::PmoKeys> {
    use pmo_crypt::{MasterKey, PmoKeys};
    PmoKeys::derive_with(&MasterKey::from_bytes([7; 32]), [1; 16], [2; 16], AEAD).ok()
}

/// Median µs of one [`AEAD`] seal (or open) of 4 KiB with the store's page context, on one
/// page, hot in cache (used for the fault floor: a fault opens one page).
pub(crate) fn aead_page_us(seal: bool) -> f64 {
    use pmo_crypt::{open_page, seal_page, PageCtx};
    let Some(keys) = page_keys() else {
        return f64::NAN;
    };
    let plain = [0x42u8; PAGE];
    let mut sealed = [0u8; PAGE];
    let mut out = [0u8; PAGE];
    let ctx = |v| PageCtx {
        pool_uuid: [1; 16],
        pmo_uuid: [2; 16],
        page_index: 5,
        version: v,
    };
    let Ok(tag) = seal_page(&keys, &ctx(1), &plain, &mut sealed) else {
        return f64::NAN;
    };
    let n = 2000;
    let mut samples = Vec::new();
    for round in 0..9u64 {
        let t = Instant::now();
        for i in 0..n {
            if seal {
                let _ = seal_page(&keys, &ctx(round * n + i + 2), &plain, &mut out);
            } else {
                let _ = open_page(&keys, &ctx(1), &sealed, &tag, &mut out);
            }
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    median(&samples)
}

/// Median µs per page to write 4 KiB to the medium, flush its lines and fence once a round,
/// for `k` distinct pages a round. As a psync writes each page to the slot its last commit
/// did not use, rounds alternate between two sets of `k` pages, so a round's destinations
/// were last written two rounds before.
pub(crate) fn persist_page_us(dir: &Path, k: usize) -> Result<f64, BenchError> {
    let (m, path) = scratch_medium(dir, "persist", 2 * k as u64 * PAGE as u64)?;
    let page = [0x77u8; PAGE];
    let mut samples = Vec::new();
    let mut result = Ok(());
    for round in 0..11u64 {
        let t = Instant::now();
        for i in 0..k as u64 {
            let off = ((round % 2) * k as u64 + i) * PAGE as u64;
            if let Err(e) = m.write(off, &page).and_then(|_| m.flush(off, PAGE as u64)) {
                result = Err(BenchError::Other(e.to_string()));
            }
        }
        if let Err(e) = m.fence() {
            result = Err(BenchError::Other(e.to_string()));
        }
        if round >= 2 {
            samples.push(t.elapsed().as_secs_f64() * 1e6 / k as f64);
        }
    }
    drop(m);
    let _ = std::fs::remove_file(&path);
    result.map(|_| median(&samples))
}

/// A scratch file of `len` zero bytes in `dir`, opened as the store opens a pool file there
/// (emulated persistent memory on tmpfs, a file elsewhere); the caller removes it.
fn scratch_medium(
    dir: &Path,
    tag: &str,
    len: u64,
) -> Result<(std::sync::Arc<dyn Medium>, std::path::PathBuf), BenchError> {
    let path = dir.join(format!("pmo-bench-{tag}-{}.bin", std::process::id()));
    std::fs::write(&path, vec![0u8; len as usize]).map_err(|source| BenchError::Io {
        op: "create scratch file".into(),
        source,
    })?;
    let kind = if pmo_os::map::on_tmpfs(&path) {
        MediumKind::EmulatedPmem
    } else {
        MediumKind::File
    };
    match pmo_medium::open_medium(&path, Some(kind)) {
        Ok(m) => Ok((m, path)),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(BenchError::Other(e.to_string()))
        }
    }
}

/// Median µs of what a sub-page log record of a `body_len`-byte body costs at least: its
/// body sealed with [`AEAD`] (`sealed`; else the CRC-32C an unprotected record carries), the
/// record (header, body, tag, 64-byte aligned) written and its lines flushed at the next free
/// place of a 16 KiB area, and one fence.
pub(crate) fn log_record_us(dir: &Path, body_len: usize, sealed: bool) -> Result<f64, BenchError> {
    use pmo_format::sublog::{record_len, HEADER_LEN, LOG_AREA_BYTES, TAG_LEN};
    let keys = page_keys().ok_or_else(|| BenchError::Other("page keys".into()))?;
    let (m, path) = scratch_medium(dir, "record", LOG_AREA_BYTES)?;
    let rec = record_len(body_len);
    let mut buf = vec![0x5au8; rec as usize];
    let n = 2000u64;
    let mut samples = Vec::new();
    let mut result = Ok(());
    let mut at = 0u64;
    'rounds: for round in 0..9u64 {
        let t = Instant::now();
        for i in 0..n {
            let (header, rest) = buf.split_at_mut(HEADER_LEN);
            let (body, tail) = rest.split_at_mut(body_len);
            if sealed {
                match pmo_crypt::seal_record(&keys, round * n + i + 1, header, body) {
                    Ok(tag) => tail[..TAG_LEN].copy_from_slice(&tag.0),
                    Err(e) => {
                        result = Err(BenchError::Other(e.to_string()));
                        break 'rounds;
                    }
                }
            } else {
                tail[..4].copy_from_slice(&pmo_format::crc(body).to_le_bytes());
            }
            if at + rec > LOG_AREA_BYTES {
                at = 0;
            }
            if let Err(e) = m
                .write(at, &buf)
                .and_then(|_| m.flush(at, rec))
                .and_then(|_| m.fence())
            {
                result = Err(BenchError::Other(e.to_string()));
                break 'rounds;
            }
            at += rec;
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    drop(m);
    let _ = std::fs::remove_file(&path);
    result.map(|_| median(&samples))
}
