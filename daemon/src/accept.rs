//! Accept loops for tonic's servers, in place of `TcpListenerStream`/`UnixListenerStream`:
//! tonic retries a failed accept at once, so running out of descriptors spun a core; these back
//! off, and the TCP one caps the connections open at once. Every connection is [`Watched`]: a
//! peer that sends nothing, or waits too long, is closed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::limits::PeerTimeouts;
use crate::watched::Watched;

/// Pause after a failed accept (out of descriptors: wait for some to be closed).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What tonic reads its connections from.
pub type Incoming<T> = ReceiverStream<std::io::Result<T>>;

/// The control socket's connections, until `stop`: each must greet within the handshake
/// timeout and never wait longer than the idle one.
pub fn unix(
    listener: UnixListener,
    timeouts: PeerTimeouts,
    mut stop: watch::Receiver<bool>,
) -> Incoming<Watched<UnixStream>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.wait_for(|s| *s) => return,
            };
            match accepted {
                Ok((s, _)) => {
                    let s = Watched::new(s, timeouts.handshake, timeouts.idle);
                    if tx.send(Ok(s)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!("control socket accept: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// The TCP listener's connections, at most `cap` open at once: one more is closed as soon as it
/// is accepted, so that it neither waits in the backlog nor holds a descriptor. Each is
/// [`Watched`] as the control socket's are.
pub fn tcp_capped(
    listener: TcpListener,
    cap: usize,
    timeouts: PeerTimeouts,
    mut stop: watch::Receiver<bool>,
) -> Incoming<Watched<Capped>> {
    let (tx, rx) = mpsc::channel(16);
    let open = Arc::new(Semaphore::new(cap));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.wait_for(|s| *s) => return,
            };
            match accepted {
                Ok((s, peer)) => {
                    let Ok(permit) = open.clone().try_acquire_owned() else {
                        tracing::debug!("TCP: {cap} connections open; closing the one from {peer}");
                        continue;
                    };
                    let _ = s.set_nodelay(true);
                    let conn = Capped {
                        io: s,
                        _permit: permit,
                    };
                    let conn = Watched::new(conn, timeouts.handshake, timeouts.idle);
                    if tx.send(Ok(conn)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!("TCP accept: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// A TCP connection that holds its place under the cap until it is dropped.
pub struct Capped {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl Connected for Capped {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}

impl AsyncRead for Capped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
