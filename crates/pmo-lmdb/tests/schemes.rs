//! Every pmo scheme and plaintext placement carries an LMDB environment: commits, a reopen, a
//! full walk, and the at-rest image holds none of the plaintext under the protected schemes.

mod common;

use std::sync::Mutex;

use common::TestPool;
use pmo_lmdb::{crashcheck, ffi, Env, EnvOptions};
use pmo_store::Scheme;

static SERIAL: Mutex<()> = Mutex::new(());

const SCHEMES: [&str; 12] = [
    "none",
    "secure",
    "wed",
    "wedi",
    "bp",
    "bp-ip",
    "bp-id",
    "sp",
    "sp-ip",
    "sp-id",
    "secure:medium",
    "bp-ip:medium",
];

#[test]
fn every_scheme_and_placement_holds_an_environment() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for scheme in SCHEMES {
        let tp = TestPool::new("schemes", scheme, 32 << 20);
        tp.pool
            .pcreate_with(
                "db",
                1 << 20,
                common::KEY.as_bytes(),
                Some(Scheme::from_name(scheme).unwrap()),
            )
            .unwrap();
        tp.install();
        {
            let env = Env::open("pmo:db", EnvOptions::default())
                .unwrap_or_else(|e| panic!("{scheme}: {e}"));
            for i in 0..40 {
                crashcheck::commit_one(&env, i)
                    .unwrap_or_else(|e| panic!("{scheme}: commit {i}: {e}"));
            }
        }
        let env = Env::open(
            "pmo:db",
            EnvOptions {
                flags: ffi::MDB_RDONLY,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{scheme}: reopen: {e}"));
        assert_eq!(
            crashcheck::verify(&env).unwrap_or_else(|e| panic!("{scheme}: {e}")),
            40,
            "{scheme}"
        );
        drop(env);
        pmo_lmdb::uninstall();
        if Scheme::from_name(scheme).unwrap().is_protected() {
            // A detach scrubs a plaintext copy on the medium in the background: wait for it.
            pmo_store::wait_for_background_detaches();
            let image = std::fs::read(&tp.path).unwrap();
            let needle = crashcheck::value(7);
            assert!(
                !image.windows(64).any(|w| w == &needle[..64]),
                "{scheme}: plaintext on the medium after detach"
            );
        }
    }
}
