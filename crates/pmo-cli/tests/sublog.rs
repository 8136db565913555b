//! A PMO with a sub-page commit log (`docs/commit.md`) whose middle record was damaged: the
//! `pmo` binary reports it as an integrity error, exit code 2, on one line; the last record
//! damaged reads as the psync before it (exit 0).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use pmo_store::{AttachOptions, DirtyTracking, KdfParams, Perm, Pool, PoolOptions, Scheme};

const KEY: &str = "log-cli-key";

fn pmo(pool: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmo"))
        .args(args)
        .env("PMO_POOL", pool)
        .env("PMO_KEY", KEY)
        .env_remove("PMO_MEDIUM")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Offsets (in the file) of the records of a log area starting at `area`.
fn records(image: &[u8], area: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = area + 64;
    while image[at..at + 4] == *b"PLOG" {
        out.push(at);
        let len = u32::from_le_bytes(image[at + 4..at + 8].try_into().unwrap());
        at += pmo_format::sublog::record_len(len as usize) as usize;
    }
    out
}

#[test]
fn a_damaged_middle_record_is_exit_2_and_a_damaged_last_one_a_rollback() {
    let dir = std::env::temp_dir().join(format!("pmo-cli-sublog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.pool");
    let pool = Pool::create(
        &path,
        8 << 20,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            scheme: Scheme::SECURE,
            ..Default::default()
        },
    )
    .unwrap();
    pool.pcreate_logged("a", 4 * 4096, KEY.as_bytes(), None)
        .unwrap();
    let info = pool.info("a").unwrap();
    let area = (info.extent_off + info.extent_len - pmo_format::sublog::LOG_AREA_BYTES) as usize;
    let a = pool
        .attach_with(
            "a",
            Perm::Write,
            KEY.as_bytes(),
            AttachOptions {
                tracking: Some(DirtyTracking::Declared),
                ..Default::default()
            },
        )
        .unwrap();
    // The first psync commits pages (and the version reservation); the next three are records.
    for (i, word) in [b"zero", b"one!", b"two!", b"thr!"].iter().enumerate() {
        a.write_at(i * 8, *word).unwrap();
        a.psync().unwrap();
    }
    // The file as a crash now would leave it: three live records.
    let image = std::fs::read(&path).unwrap();
    a.detach().unwrap();
    drop(pool);
    let recs = records(&image, area);
    assert_eq!(recs.len(), 3);

    let mut bad = image.clone();
    bad[recs[1] + 60] ^= 0x40;
    std::fs::write(&path, &bad).unwrap();
    let o = pmo(&path, &["read", "a", "--offset", "0", "--len", "32"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    assert!(err.contains("sub-page log record 2 of 3"), "{err}");

    let mut last = image.clone();
    last[recs[2] + 60] ^= 0x40;
    std::fs::write(&path, &last).unwrap();
    let o = pmo(&path, &["read", "a", "--offset", "0", "--len", "24"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(&o.stdout[..], b"zero\0\0\0\0one!\0\0\0\0two!\0\0\0\0");
    let _ = std::fs::remove_dir_all(&dir);
}
