//! The namespace copy a handle keeps after its own pcreate and pdestroy (updated in place, not
//! reloaded) agrees with the medium and with another handle's changes.

use pmo_store::{KdfParams, Pool, PoolOptions};

fn names(p: &Pool) -> Vec<String> {
    let mut v: Vec<String> = p.list().unwrap().into_iter().map(|i| i.name).collect();
    v.sort();
    v
}

#[test]
fn own_changes_and_another_handles_changes_are_both_seen() {
    let dir = std::env::temp_dir().join(format!("pmo-ns-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.pool");
    let a = Pool::create(
        &path,
        16 << 20,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(64),
            ..Default::default()
        },
    )
    .unwrap();
    let b = Pool::open(&path).unwrap();
    for i in 0..10 {
        a.pcreate_with(&format!("a{i}"), 4096, b"k", None).unwrap();
        b.pcreate_with(&format!("b{i}"), 8192, b"k", None).unwrap();
        assert!(a.exists(&format!("b{i}")).unwrap());
        assert!(b.exists(&format!("a{i}")).unwrap());
    }
    for i in (0..10).step_by(2) {
        a.pdestroy(&format!("b{i}"), b"k").unwrap();
        b.pdestroy(&format!("a{i}"), b"k").unwrap();
        assert!(!a.exists(&format!("a{i}")).unwrap());
        assert!(!b.exists(&format!("b{i}")).unwrap());
    }
    assert_eq!(names(&a), names(&b));
    assert_eq!(names(&a).len(), 10);
    // Space freed by one handle is reused by the other, with no overlap.
    for i in 0..5 {
        a.pcreate_with(&format!("c{i}"), 8192, b"k", None).unwrap();
    }
    assert_eq!(names(&b).len(), 15);
    let r = Pool::open(&path).unwrap().check().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.used_bytes + r.free_bytes, r.heap_len);
    drop((a, b));
    std::fs::remove_dir_all(&dir).unwrap();
}
