//! `pmo-lmdb-run PROGRAM [ARGS]`: run one of LMDB's programs (mdb_stat, mdb_dump, mdb_load,
//! mdb_copy, mdb_drop, mtest .. mtest6), built unchanged from LMDB's source and linked with the
//! patched library, so `pmo:NAME` paths (or any path under `PMO_LMDB=1`) are PMOs of the pool
//! `PMO_POOL` with the key `PMO_KEY`. The programs' own exit status is returned.
//!
//! `pmo-lmdb-run --include-dir`: the directory of the `lmdb.h` to compile C programs with
//! against `libpmo_lmdb.a`.
//!
//! `pmo-lmdb-run --lib-dir`: the folder holding the drop-in `liblmdb.so.0` (crate
//! `pmo-lmdb-dropin`), for `LD_LIBRARY_PATH`: `PREFIX/lib/pmo/lmdb` of an installed pmo, or
//! in a build tree `lmdb-dropin/` beside this program (made on first use, a link to the
//! built `libpmo_lmdb_dropin.so`).
//!
//! `pmo-lmdb-run --pmo-name PATH [--nosubdir]`: the PMO an environment path maps to under
//! `PMO_LMDB=1` or a matching `PMO_LMDB_PATHS` (`pmo_lmdb::paths`).
//!
//! `pmo-lmdb-run writer PATH`: a stream of committed write transactions for the crash tests:
//! transaction i puts key `k%08d` (i) = value derived from i, and after its commit returns
//! prints `i` on stdout. Runs until killed.

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(prog) = args.first() else {
        eprintln!(
            "usage: pmo-lmdb-run PROGRAM [ARGS] (programs: {})",
            pmo_lmdb::programs::PROGRAMS.join(", ")
        );
        std::process::exit(1);
    };
    if prog == "--include-dir" {
        // The patched source's directory: its lmdb.h is the header for libpmo_lmdb.a.
        println!("{}", concat!(env!("OUT_DIR"), "/liblmdb"));
        return;
    }
    if prog == "--lib-dir" {
        match lib_dir() {
            Ok(dir) => println!("{}", dir.display()),
            Err(e) => {
                eprintln!("pmo-lmdb-run: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if prog == "--pmo-name" {
        let (Some(path), rest) = (args.get(1), &args[args.len().min(2)..]) else {
            eprintln!("usage: pmo-lmdb-run --pmo-name PATH [--nosubdir]");
            std::process::exit(1);
        };
        let nosubdir = rest.iter().any(|a| a == "--nosubdir");
        match pmo_lmdb::paths::pmo_name(path, nosubdir, true) {
            Ok(Some(name)) => println!("{name}"),
            Ok(None) => unreachable!("every path names a PMO here"),
            Err(e) => {
                eprintln!("pmo-lmdb-run: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if prog == "writer" {
        std::process::exit(writer(args.get(1).map_or("pmo:crash", |s| s.as_str())));
    }
    match pmo_lmdb::programs::run(prog, &args[1..]) {
        Some(code) => {
            // Let a detach's background work (scrubbing a plaintext copy) finish before exit.
            pmo_store::wait_for_background_detaches();
            if code != 0 {
                if let Some((msg, _)) = pmo_lmdb::glue::last_error() {
                    eprintln!("pmo-lmdb-run: {msg}");
                }
            }
            std::process::exit(code)
        }
        None => {
            eprintln!(
                "pmo-lmdb-run: no program {prog:?} (programs: {})",
                pmo_lmdb::programs::PROGRAMS.join(", ")
            );
            std::process::exit(1);
        }
    }
}

/// The folder of the drop-in `liblmdb.so.0` (see the module's documentation).
fn lib_dir() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let bin = exe.parent().ok_or("this program has no directory")?;
    if let Some(prefix) = bin.parent() {
        let installed = prefix.join("lib/pmo/lmdb");
        if installed.join("liblmdb.so.0").is_file() {
            return Ok(installed);
        }
    }
    let built = bin.join("libpmo_lmdb_dropin.so");
    if !built.is_file() {
        return Err(format!(
            "no drop-in library: {} is missing (cargo build -p pmo-lmdb-dropin, or scripts/install)",
            built.display()
        ));
    }
    let dir = bin.join("lmdb-dropin");
    let link = dir.join("liblmdb.so.0");
    if std::fs::read_link(&link).ok().as_deref()
        != Some(std::path::Path::new("../libpmo_lmdb_dropin.so"))
    {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink("../libpmo_lmdb_dropin.so", &link) {
            // Another process may have made it in the meantime.
            if !link.exists() {
                return Err(format!("{}: {e}", link.display()));
            }
        }
    }
    Ok(dir)
}

fn writer(path: &str) -> i32 {
    let env = match pmo_lmdb::Env::open(path, pmo_lmdb::EnvOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("pmo-lmdb-run writer: {e}");
            return 1;
        }
    };
    // Continue after the newest transaction a previous (killed) writer committed.
    let mut next = match pmo_lmdb::crashcheck::verify(&env) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("pmo-lmdb-run writer: {e}");
            return 2;
        }
    };
    let mut out = std::io::stdout().lock();
    loop {
        if let Err(e) = pmo_lmdb::crashcheck::commit_one(&env, next) {
            eprintln!("pmo-lmdb-run writer: {e}");
            return 1;
        }
        if writeln!(out, "{next}").and_then(|_| out.flush()).is_err() {
            return 0;
        }
        next += 1;
    }
}
