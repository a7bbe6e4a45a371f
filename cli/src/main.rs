//! ddpcheck: the command line. Parses arguments, picks where to run (local, `--sim`, `--daemon`),
//! runs the command and maps its outcome to an exit code.

/// `print!` for command output that never panics: a reader that went away (`ddpcheck ... | head`)
/// ends the process quietly (see [`write_out`]).
macro_rules! out {
    ($($t:tt)*) => {
        $crate::write_out(format_args!($($t)*))
    };
}

/// `eprintln!` that never panics: a closed stderr (a reader that went away) loses the line,
/// never the exit code or the exit itself.
macro_rules! errln {
    ($($t:tt)*) => {
        $crate::say(format_args!($($t)*))
    };
}

/// `println!` for command output, as [`out!`].
macro_rules! outln {
    () => {
        $crate::write_out(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::write_out(format_args!("{}\n", format_args!($($t)*)))
    };
}

mod args;
mod check_cmd;
mod cluster_cmd;
mod collectives_cmd;
mod config_cmd;
mod daemon_bin;
mod daemon_runner;
mod ddp_cmd;
mod demo;
mod diff_cmd;
mod explain_cmd;
mod flag_values;
mod global_args;
mod history_cmd;
mod memory_cmd;
mod model_args;
mod plot;
mod progress;
mod read_at_edge;
mod recipe_args;
mod recommend_cmd;
mod render;
mod width;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use args::{BenchCommand, Cli, Command, TopoArgs};
use clap::Parser;
use ddpcheck_core::verdict::EXIT_BROKEN_PIPE;
use ddpcheck_engine::RunError;
use global_args::{make_target, GlobalArgs};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    // Hidden subcommand: the NCCL worker runs as a child of our own binary (invariant 1).
    if argv.get(1).map(String::as_str) == Some("worker") {
        let code = ddpcheck_gpu::worker::main_from_args(&argv[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    stop_children_on_signals();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // Bad flags: one clear line and exit 64 (scripts read the first line of stderr).
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let usage = RunError::Usage(format!(
                "{} (see --help)",
                first.trim_start_matches("error: ")
            ));
            errln!("ddpcheck: {usage}");
            return exit_code(usage.exit_code());
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    daemon_runner::set_client_tls(cli.global.client_tls());
    let outcome = run(&cli);
    if INTERRUPTED.load(Ordering::SeqCst) {
        // The run ended because Ctrl-C stopped its children (a killed worker reads as UNKNOWN):
        // the signal thread is ending them and exits 130; its outcome, not this one, is the answer.
        await_signal_exit();
    }
    let code = match outcome {
        Ok(code) => code,
        Err(e) => {
            errln!("ddpcheck: {e}");
            e.exit_code()
        }
    };
    exit_code(code)
}

/// A verdict's code, or the code [`RunError::exit_code`] gives an error (docs/exit-codes.md).
fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Set by the signal thread before it stops our children.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The signal that interrupted us (SIGINT until one is received).
static SIGNAL: AtomicI32 = AtomicI32::new(2);
/// Taken around each write of command output; the signal thread takes it to hold back the
/// report of the run it stops.
static OUTPUT: Mutex<()> = Mutex::new(());

/// How long the signal thread may take to end our children (3 s of SIGTERM grace, then
/// SIGKILL) and exit; past it another thread exits in its place.
const SIGNAL_EXIT_BOUND: Duration = Duration::from_secs(10);

/// Ctrl-C or SIGTERM during a local run: end our children's process groups (NCCL worker,
/// torchrun and its ranks) before exiting, so nothing keeps running on the GPUs. Nothing on
/// this way out may panic or block on a stream (a closed stderr, a stalled stdout).
fn stop_children_on_signals() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            SIGNAL.store(sig, Ordering::SeqCst);
            INTERRUPTED.store(true, Ordering::SeqCst);
            // Held until we exit, where it can be taken soon: the report of the run being
            // stopped (its killed worker reads as UNKNOWN) must not reach stdout.
            let _quiet = take_output_within(Duration::from_secs(1));
            ddpcheck_gpu::children::terminate_all(Duration::from_secs(3));
            errln!("ddpcheck: interrupted");
            std::process::exit(128 + sig);
        }
    });
}

/// The output gate, waiting for it at most `bound` (a write blocked on a stalled reader
/// holds it).
fn take_output_within(bound: Duration) -> Option<std::sync::MutexGuard<'static, ()>> {
    let until = Instant::now() + bound;
    loop {
        match OUTPUT.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// Once a signal came: wait for the signal thread's exit, and exit in its place (128 + the
/// signal) if it has not within [`SIGNAL_EXIT_BOUND`].
fn await_signal_exit() -> ! {
    let until = Instant::now() + SIGNAL_EXIT_BOUND;
    while Instant::now() < until {
        std::thread::park_timeout(until.saturating_duration_since(Instant::now()));
    }
    std::process::exit(128 + SIGNAL.load(Ordering::SeqCst))
}

/// Writes one line to stderr, ignoring a stderr that cannot be written (see `errln!`).
pub fn say(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{args}");
}

fn run(cli: &Cli) -> Result<i32, RunError> {
    let global = &cli.global;
    match &cli.command {
        Command::Demo => demo::run(global),
        Command::Topo(a) => topo(global, a),
        Command::Check(a) => check_cmd::run(global, a),
        Command::Bench(BenchCommand::Collectives(a)) => collectives_cmd::run(global, a),
        Command::Bench(BenchCommand::Ddp(a)) => ddp_cmd::run(global, a),
        Command::Explain(a) => explain_cmd::run(global, a),
        Command::Diff(a) => diff_cmd::run(global, a),
        Command::Recommend(a) => recommend_cmd::run(global, a),
        Command::Memory(a) => memory_cmd::run(global, a),
        Command::History(a) => history_cmd::run(global, a),
        Command::Config(c) => config_cmd::run(global, c),
        Command::Cluster(c) => cluster_cmd::run(global, c),
    }
}

pub fn print_json<T: serde::Serialize>(v: &T) -> Result<(), RunError> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| RunError::Daemon(format!("JSON output: {e}")))?;
    outln!("{s}");
    Ok(())
}

fn topo(cli: &GlobalArgs, a: &TopoArgs) -> Result<i32, RunError> {
    let r = make_target(cli)?.topo(&a.gpus)?;
    if cli.json {
        print_json(&r)?;
    } else {
        out!("{}", render::topo(&r));
    }
    Ok(0)
}

/// Writes command output to stdout. Where the reader has gone (a closed pipe) the process ends
/// with 141, as a shell reports a tool that SIGPIPE ended (Rust ignores SIGPIPE, and `print!`
/// would panic); any other write error is said on stderr and ends it with 74 (EX_IOERR).
/// After a signal nothing more is written: the signal thread is ending the run and exits.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _gate = OUTPUT.lock().unwrap_or_else(|p| p.into_inner());
    if INTERRUPTED.load(Ordering::SeqCst) {
        await_signal_exit();
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        let failed = RunError::Output(e);
        if failed.exit_code() != EXIT_BROKEN_PIPE {
            errln!("ddpcheck: {failed}");
        }
        std::process::exit(failed.exit_code());
    }
}
