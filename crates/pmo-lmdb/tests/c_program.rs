//! A C program using LMDB's own API opens an environment on a PMO (`pmo:NAME`), linked against
//! `libpmo_lmdb.a` with LMDB's `lmdb.h`: writes in one process, checks in another. Needs `cc`;
//! without a C compiler the test prints a note and passes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestPool, KEY};

/// `libpmo_lmdb.a` of this build: `cargo test` writes it to `target/<profile>/deps/` (with or
/// without a hash in its name), `cargo build` to `target/<profile>/`: the newest.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let mut candidates = vec![profile.join("libpmo_lmdb.a")];
    for e in std::fs::read_dir(profile.join("deps")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("libpmo_lmdb") && name.ends_with(".a") {
            candidates.push(e.path());
        }
    }
    candidates
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).and_then(|m| m.modified()).ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .expect("libpmo_lmdb.a next to the test binary")
}

#[test]
fn a_c_program_opens_an_environment_on_a_pmo() {
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("note: no C compiler (cc): skipped");
        return;
    }
    let tp = TestPool::new("c", "secure", 64 << 20);
    let exe = tp.dir.join("lmdb_pmo");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/lmdb_pmo.c");
    let include = Path::new(env!("OUT_DIR")).join("liblmdb");
    let out = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(&include)
        .arg(&src)
        .arg(library())
        .args([
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (arg, expect) in [("write", "wrote 1010"), ("check", "checked 1010")] {
        let out = Command::new(&exe)
            .arg(arg)
            .env("PMO_POOL", &tp.path)
            .env("PMO_KEY", KEY)
            .env("PMO_LMDB_LOCKDIR", tp.dir.join("locks"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{arg}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expect);
    }
    assert_eq!(tp.pool.info("c-env").unwrap().size, 8 << 20);
}
