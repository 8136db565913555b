//! The scratch a killed `pmo bench filebench` leaves behind (issue 31: nothing of pmo's
//! outlives what it belongs to). A run keeps its pools and POSIX trees at names that carry its
//! process id (`pmo-filebench-PID.pool`, `pmo-filebench-design-PID.pool`,
//! `pmo-filebench-PID-WORKLOAD/`) and removes them as it goes; a run killed midway (a signal,
//! a power cut) cannot. The next run removes those whose process is gone ([`sweep`]). A live
//! process with that id (another run, or the id reused) keeps them.

use std::path::{Path, PathBuf};

/// The process id a scratch name of a run carries, if `name` is one.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("pmo-filebench-")?;
    let rest = rest.strip_prefix("design-").unwrap_or(rest);
    let digits: &str = match rest.strip_suffix(".pool") {
        Some(d) => d,
        // A POSIX tree: PID-WORKLOAD.
        None => rest.split_once('-')?.0,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether process `pid` exists now.
fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Remove from `dir` the scratch of runs whose process is gone; returns what was removed.
/// Anything else in `dir` is left, and so is a name whose removal fails.
pub fn sweep(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut gone = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(owner) else {
            continue;
        };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        let path = e.path();
        let removed = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(err) => Err(err),
        };
        if removed.is_ok() {
            gone.push(path);
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_a_runs_scratch_carry_its_pid() {
        assert_eq!(owner("pmo-filebench-123.pool"), Some(123));
        assert_eq!(owner("pmo-filebench-design-77.pool"), Some(77));
        assert_eq!(owner("pmo-filebench-9-fileserver"), Some(9));
        assert_eq!(owner("pmo-filebench-x.pool"), None);
        assert_eq!(owner("pmo-filebench-.pool"), None);
        assert_eq!(owner("pmo-pins-0011"), None);
        assert_eq!(owner("pmo-filebench-12"), None, "neither a pool nor a tree");
    }

    #[test]
    fn the_sweep_removes_only_the_scratch_of_dead_runs() {
        let dir = std::env::temp_dir().join(format!("pmo-fb-leftovers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A process that has exited: its id names no process (unless reused this instant).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let pool = dir.join(format!("pmo-filebench-{dead}.pool"));
        let design = dir.join(format!("pmo-filebench-design-{dead}.pool"));
        let tree = dir.join(format!("pmo-filebench-{dead}-varmail"));
        let mine = dir.join(format!("pmo-filebench-{me}.pool"));
        let other = dir.join("not-a-run.pool");
        for f in [&pool, &design, &mine, &other] {
            std::fs::write(f, b"x").unwrap();
        }
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::write(tree.join("sub/f"), b"x").unwrap();
        let mut gone = sweep(&dir);
        gone.sort();
        let mut want = vec![pool.clone(), design.clone(), tree.clone()];
        want.sort();
        assert_eq!(gone, want);
        assert!(!pool.exists() && !design.exists() && !tree.exists());
        assert!(
            mine.exists() && other.exists(),
            "a live run's and foreign files stay"
        );
        assert!(sweep(Path::new("/nonexistent-pmo-dir")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
