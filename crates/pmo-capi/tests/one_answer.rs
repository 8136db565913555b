//! Issue 31: the C rows of `docs/c-api.md`'s table "One situation, one answer". A missing
//! named pool (`tests/c/pmo_no_pool.c`), a wrong key, a PMO attached in a conflicting mode (by
//! this process and by a forked child) and a full pool (`tests/c/pmo_one_answer.c`) each give
//! their `PMO_E_*` code, errno and the `pmo` command's sentence.
//!
//! Needs `cc` (gcc or clang); without a C compiler the tests print a note and pass.

mod common;

use common::*;

/// A pool that does not exist, named with no size to create it: `PMO_E_NOT_FOUND`, `ENOENT` and
/// the `pmo` command's sentence. Not created as a side effect.
#[test]
fn missing_named_pool_gives_not_found_and_the_cli_sentence() {
    if !compiler_available("cc") {
        eprintln!("note: no C compiler; skipped");
        return;
    }
    let dir = scratch("nopool");
    let exe = dir.join("pmo_no_pool");
    build_c_static("pmo_no_pool.c", &exe, &[]);
    let missing = dir.join("absent.pool");
    let out = run_ok(
        program(&exe, &dir.join("unused.pool")).arg(&missing),
        "pmo_no_pool",
    );
    let want = format!(
        "no pool at {}: create one with `pmo init --size 1GiB`, or name another with --pool or PMO_POOL",
        missing.display()
    );
    assert!(out.contains(&format!("message={want}")), "{out}");
    assert!(!missing.exists(), "the missing pool was created");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Wrong key, busy (here and in another process) and full pool: the program checks code,
/// errno and sentence of each and exits 0; the lines it prints are checked here too.
#[test]
fn wrong_key_busy_and_full_pool_give_the_tables_code_errno_and_sentence() {
    if !compiler_available("cc") {
        eprintln!("note: no C compiler; skipped");
        return;
    }
    let dir = scratch("oneanswer");
    let exe = dir.join("pmo_one_answer");
    build_c_static("pmo_one_answer.c", &exe, &[]);
    let pool = dir.join("one.pool");
    let out = run_ok(
        program(&exe, &dir.join("unused.pool")).arg(&pool),
        "pmo_one_answer",
    );
    let (eacces, ebusy, enospc) = (libc::EACCES, libc::EBUSY, libc::ENOSPC);
    for want in [
        format!("wrong key: errno={eacces} code=-1001 message=wrong key for PMO 'a'\n"),
        format!("busy here: errno={ebusy} code=-1005 message=PMO 'a' is attached read-write by this process (detach it first)\n"),
        format!("busy elsewhere: errno={ebusy} code=-1005 message=PMO 'a' is attached read-write by another process\n"),
        format!("full pool: errno={enospc} code=-1004 message=pool is full: "),
    ] {
        assert!(out.contains(&want), "want {want:?} in:\n{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
