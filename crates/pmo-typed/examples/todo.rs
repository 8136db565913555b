//! `todo`: a persistent to-do list in a PMO, with no `unsafe` (`#![forbid(unsafe_code)]`).
//!
//! ```text
//! cargo run -p pmo-typed --example todo -- /dev/shm/todo.pool add "buy milk"
//! cargo run -p pmo-typed --example todo -- /dev/shm/todo.pool list
//! cargo run -p pmo-typed --example todo -- /dev/shm/todo.pool done 1
//! cargo run -p pmo-typed --example todo -- /dev/shm/todo.pool rm 1
//! cargo run -p pmo-typed --example todo -- /dev/shm/todo.pool list --from 2 --to 9
//! ```
//!
//! The pool is created on first use (key from `TODO_KEY`, default "todo"). Each command is
//! one attach and at most one psync: a crash or kill mid-command leaves the list as before it.
#![forbid(unsafe_code)]

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use pmo_store::{Pool, PoolOptions};
use pmo_typed::{PBTreeMap, PString, Persistent, TypedHeap, TypedReader};
use std::path::PathBuf;

#[derive(Persistent, Default)]
#[repr(C)]
struct Task {
    /// 0: open, 1: done (an integer: `bool` may not live in a PMO).
    done: u64,
    title: PString,
}

#[derive(Persistent, Default)]
#[repr(C)]
struct Todo {
    next_id: u64,
    tasks: PBTreeMap<u64, Task>,
}

#[derive(Parser)]
#[command(about = "A persistent to-do list living in a PMO")]
struct Args {
    /// Pool file (created if missing).
    pool: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Add a task; prints its id.
    Add { title: String },
    /// Mark a task done.
    Done { id: u64 },
    /// Remove a task.
    Rm { id: u64 },
    /// List tasks (ids in [from, to]), read-only.
    List {
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long, default_value_t = u64::MAX)]
        to: u64,
    },
}

const NAME: &str = "todo";

fn main() {
    if let Err(e) = run() {
        eprintln!("todo: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    let key = std::env::var("TODO_KEY").unwrap_or_else(|_| "todo".into());
    let pool = if args.pool.exists() {
        Pool::open(&args.pool)
    } else {
        Pool::create(&args.pool, 64 << 20, &PoolOptions::default())
    }
    .with_context(|| format!("pool {}", args.pool.display()))?;
    if let Cmd::List { from, to } = args.cmd {
        if !pool.exists(NAME)? {
            return Ok(());
        }
        let reader = TypedReader::open(&pool, NAME, key.as_bytes())?;
        let (todo, h) = match reader.root::<Todo>() {
            Err(pmo_typed::TypedError::NoRoot) => return Ok(()),
            r => r?,
        };
        for e in todo.tasks.range(h, from..=to)? {
            let (id, t) = e?;
            let mark = if t.done != 0 { "x" } else { " " };
            println!("{id:>4} [{mark}] {}", t.title.as_str(h)?);
        }
        return Ok(());
    }
    let mut heap = TypedHeap::open_or_create(&pool, NAME, 16 << 20, key.as_bytes())?;
    let (todo, h) = heap.root::<Todo>()?;
    match args.cmd {
        Cmd::Add { title } => {
            todo.next_id += 1;
            let id = todo.next_id;
            todo.tasks.insert(h, id, Task::default())?;
            if let Some(t) = todo.tasks.get_mut(h, &id)? {
                t.title.set(h, &title)?;
            }
            println!("{id}");
        }
        Cmd::Done { id } => match todo.tasks.get_mut(h, &id)? {
            Some(t) => t.done = 1,
            None => bail!("no task {id}"),
        },
        Cmd::Rm { id } => {
            if !todo.tasks.remove(h, &id)? {
                bail!("no task {id}");
            }
        }
        Cmd::List { .. } => unreachable!("handled above"),
    }
    heap.psync()?;
    heap.detach()?;
    Ok(())
}
