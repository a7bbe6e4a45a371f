//! A network peer's connection under its timeouts: its first bytes must come within a greeting
//! timeout (`/metrics`' header timeout; the control socket's and the TLS port's handshake), and
//! then no read may wait longer than the idle timeout, nor any write (a reader too slow to take
//! its answers). A timeout is a `TimedOut` error, on which the server closes the connection.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_io_timeout::TimeoutStream;
use tonic::transport::server::Connected;

/// `S` with a greeting timeout, then an idle timeout on reads and writes.
pub struct Watched<S> {
    io: Pin<Box<TimeoutStream<S>>>,
    idle: Duration,
    greeted: bool,
}

impl<S: AsyncRead + AsyncWrite> Watched<S> {
    /// The first byte must be read within `greeting` of the first read; after it, no read or
    /// write may wait longer than `idle`.
    pub fn new(io: S, greeting: Duration, idle: Duration) -> Watched<S> {
        let mut io = TimeoutStream::new(io);
        io.set_read_timeout(Some(greeting));
        io.set_write_timeout(Some(idle));
        Watched {
            io: Box::pin(io),
            idle,
            greeted: false,
        }
    }

    pub fn get_ref(&self) -> &S {
        self.io.get_ref()
    }
}

impl<S: Connected + AsyncRead + AsyncWrite> Connected for Watched<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> S::ConnectInfo {
        self.get_ref().connect_info()
    }
}

impl<S: AsyncRead + AsyncWrite> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = self.io.as_mut().poll_read(cx, buf);
        if !self.greeted && matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.greeted = true;
            let idle = self.idle;
            self.io.as_mut().set_read_timeout_pinned(Some(idle));
        }
        read
    }
}

impl<S: AsyncRead + AsyncWrite> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.io.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.io.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.io.as_mut().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.io.as_mut().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_silent_peer_times_out_at_the_greeting_then_at_the_idle_timeout() {
        let ms = Duration::from_millis;
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut w = Watched::new(ours, ms(50), ms(300));
        let mut buf = [0u8; 8];
        let e = w.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);

        let (ours, mut theirs2) = tokio::io::duplex(64);
        let mut w = Watched::new(ours, ms(50), ms(300));
        theirs2.write_all(b"hi").await.unwrap();
        assert_eq!(w.read(&mut buf).await.unwrap(), 2);
        // Past the greeting timeout, within the idle one: still open.
        let start = tokio::time::Instant::now();
        let e = w.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= ms(250), "{:?}", start.elapsed());
        theirs.shutdown().await.unwrap();
    }
}
