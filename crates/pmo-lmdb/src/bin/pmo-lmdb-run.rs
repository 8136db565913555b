//! `pmo-lmdb-run PROGRAM [ARGS]`: run one of LMDB's programs (mdb_stat, mdb_dump, mdb_load,
//! mdb_copy, mdb_drop, mtest .. mtest6), built unchanged from LMDB's source and linked with the
//! patched library, so `pmo:NAME` paths (or any path under `PMO_LMDB=1`) are PMOs of the pool
//! `PMO_POOL` with the key `PMO_KEY`. The programs' own exit status is returned.
//!
//! `pmo-lmdb-run --include-dir`: the directory of the `lmdb.h` to compile C programs with
//! against `libpmo_lmdb.a`.
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
