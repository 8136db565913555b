//! `pmo __assets DIR` (hidden): man pages and shell completions generated from the command's own
//! clap definition, for `scripts/install`. Writes `DIR/man1/pmo.1`, one `pmo-SUB.1` per
//! subcommand (nested ones as `pmo-SUB-SUBSUB.1`), and `DIR/completions/{pmo.bash,_pmo,pmo.fish}`.

use std::path::Path;

use anyhow::Context;
use clap_complete::Shell;

/// `pmo __assets DIR`: write the files and list them.
pub fn main(cmd: clap::Command) -> std::process::ExitCode {
    let Some(dir) = std::env::args_os().nth(2) else {
        eprintln!("pmo: usage: pmo __assets DIR");
        return std::process::ExitCode::from(1);
    };
    match write(cmd, Path::new(&dir)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("pmo: {}", msg.join(": "));
            std::process::ExitCode::from(1)
        }
    }
}

/// Write every man page and completion script of `cmd` under `dir`; returns the files written.
pub fn write(mut cmd: clap::Command, dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    cmd.build();
    let man = dir.join("man1");
    let comp = dir.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
    }
    let mut written = Vec::new();
    man_pages(&cmd, "pmo", &man, &mut written)?;
    for (shell, file) in [
        (Shell::Bash, "pmo.bash"),
        (Shell::Zsh, "_pmo"),
        (Shell::Fish, "pmo.fish"),
    ] {
        let path = comp.join(file);
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd, "pmo", &mut buf);
        std::fs::write(&path, buf).with_context(|| format!("write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The man page of `cmd` named `name`, then one per visible subcommand, recursively.
fn man_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut Vec<std::path::PathBuf>,
) -> anyhow::Result<()> {
    // After `build`, a subcommand's display name is already `pmo-SUB`.
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .title(name.to_string())
        .render(&mut buf)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, buf).with_context(|| format!("write {}", path.display()))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        man_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
