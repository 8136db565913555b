//! A destroy and a pin table file nobody holds (issue 29 made a destroy skip the `unlink` when
//! the PMO's readers word is clear): the file a reader left when it died between making its
//! table and setting the word outlives the destroy, and the sweep a pool open runs removes it;
//! a table whose word is set goes with the destroy itself.

use std::path::PathBuf;

use pmo_format::KdfParams;
use pmo_pool::pool::{Pool, PoolOptions};

fn table_path(pool: &Pool, name: &str) -> PathBuf {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let pmo = pool.info(name).unwrap().uuid;
    pmo_pins::table::dir().join(format!(
        "pmo-pins-{}-{}",
        hex(&pool.superblock().uuid[..8]),
        hex(&pmo)
    ))
}

#[test]
fn a_destroy_leaves_only_an_unannounced_orphan_table_for_the_sweep() {
    let path = std::env::temp_dir().join(format!("pmo-pool-destroy-pins-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ..Default::default()
    };
    let pool = Pool::create(&path, 16 << 20, &opts).unwrap();

    // A table file nobody holds, its word clear: a reader died making it.
    pool.pcreate("a", 4 << 12, b"k").unwrap();
    let a = table_path(&pool, "a");
    std::fs::write(&a, [0u8; 4096]).unwrap();
    pool.pdestroy("a", b"k").unwrap();
    assert!(
        a.exists(),
        "the destroy skips the unlink when no table was announced"
    );
    let swept = pmo_pins::table::sweep_orphans(&pmo_pins::table::dir());
    assert!(
        swept.contains(&a) && !a.exists(),
        "the sweep removes it: {swept:?}"
    );

    // With the word set (a table announced, its users gone), the destroy removes the file.
    pool.pcreate("b", 4 << 12, b"k").unwrap();
    let b = table_path(&pool, "b");
    std::fs::write(&b, [0u8; 4096]).unwrap();
    let e = pool.entry("b").unwrap();
    let readers_word = e.extent_off + pmo_format::layout::PmoLayout::READERS_OFF;
    pool.medium()
        .write(readers_word, &1u64.to_le_bytes())
        .unwrap();
    pool.pdestroy("b", b"k").unwrap();
    assert!(!b.exists(), "an announced table goes with the destroy");

    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
