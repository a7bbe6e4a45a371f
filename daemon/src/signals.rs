//! The signals the daemon answers (docs/operations.md, "Signals"): TERM, INT and QUIT stop it in
//! order (runs ended and stored `interrupted`, children ended, the socket removed); HUP, USR1,
//! USR2 and ALRM are logged and ignored, since the configuration is read only at start; XFSZ is
//! ignored, so that a write past the file-size limit (`ulimit -f`) fails with EFBIG and is
//! handled as a full disk is, instead of killing the daemon.

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Ignores SIGXFSZ for this process and the children it starts (an ignored disposition is
/// inherited across exec): a write past the file-size limit then returns EFBIG.
pub fn ignore_file_size_limit() {
    // SAFETY: signal(2) with SIG_IGN installs no handler code and touches no memory of ours.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The signals that stop the daemon, and those it logs and ignores.
pub struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
    alrm: Signal,
}

impl Signals {
    /// Installs the handlers. Call it before the daemon starts serving: a signal that comes
    /// after its ready line must find them.
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            alrm: signal(SignalKind::alarm())?,
        })
    }

    /// Waits for a signal that stops the daemon, logging the ignored ones as they come; the
    /// stopping signal's name.
    pub async fn until_stop(&mut self) -> &'static str {
        loop {
            let ignored = tokio::select! {
                _ = self.term.recv() => return "SIGTERM",
                _ = self.int.recv() => return "SIGINT",
                _ = self.quit.recv() => return "SIGQUIT",
                _ = self.hup.recv() => "SIGHUP",
                _ = self.usr1.recv() => "SIGUSR1",
                _ = self.usr2.recv() => "SIGUSR2",
                _ = self.alrm.recv() => "SIGALRM",
            };
            let why = if ignored == "SIGHUP" {
                "the configuration is read at start only; restart ddpcheckd to apply a change"
            } else {
                "it asks nothing of ddpcheckd"
            };
            tracing::warn!("{ignored} ignored: {why}");
        }
    }
}
