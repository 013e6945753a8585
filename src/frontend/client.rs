//! The client's socket (plain TCP, TLS or a Unix socket): buffered reads
//! of framed messages, buffered writes.

use crate::protocol::{read_message, FrameError, Message};
use bytes::BytesMut;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A client connection, before or after the TLS handshake.
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    Unix(UnixStream),
}

impl ClientStream {
    pub fn is_tls(&self) -> bool {
        matches!(self, ClientStream::Tls(_))
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, ClientStream::Unix(_))
    }

    /// Where the client is (`None`: its TCP address could not be read).
    pub fn peer(&self) -> Option<Peer> {
        match self {
            ClientStream::Plain(s) => s.peer_addr().ok().map(Peer::Tcp),
            ClientStream::Tls(s) => s.get_ref().0.peer_addr().ok().map(Peer::Tcp),
            ClientStream::Unix(_) => Some(Peer::Unix),
        }
    }
}

/// Where a client came from: shown as `address:port`, or `[local]` on
/// the Unix socket (as PostgreSQL's connection log).
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    Tcp(std::net::SocketAddr),
    Unix,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => addr.fmt(f),
            Peer::Unix => f.write_str("[local]"),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, data),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
            ClientStream::Unix(s) => Pin::new(s).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

pub struct Client {
    stream: ClientStream,
    read_buf: BytesMut,
    write_buf: BytesMut,
}

impl Client {
    pub fn new(stream: ClientStream) -> Client {
        Client {
            stream,
            read_buf: BytesMut::with_capacity(8192),
            write_buf: BytesMut::with_capacity(8192),
        }
    }

    pub async fn read(&mut self, max_len: usize) -> Result<Message, FrameError> {
        read_message(&mut self.stream, &mut self.read_buf, max_len).await
    }

    /// The type of the client's next message, when it has already
    /// arrived: in the buffer, else in the socket (read without waiting:
    /// a message written with the one before may come a moment later).
    pub fn next_tag(&mut self) -> Option<u8> {
        if self.read_buf.is_empty() {
            use futures::FutureExt;
            use tokio::io::AsyncReadExt;
            let _ = self.stream.read_buf(&mut self.read_buf).now_or_never();
        }
        self.read_buf.first().copied()
    }

    /// Resolves once the client has closed its socket (or the socket
    /// broke). What the client sends meanwhile is read into the buffer
    /// `read` takes messages from, up to `read_ahead` bytes; past that it
    /// is left in the socket and the client's leaving goes unnoticed until
    /// the session reads it, as a client that pipelines that much while a
    /// statement runs has to wait for it anyway.
    pub async fn gone(&mut self, read_ahead: usize) {
        use tokio::io::AsyncReadExt;
        while self.read_buf.len() < read_ahead {
            match self.stream.read_buf(&mut self.read_buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        std::future::pending().await
    }

    pub fn peer(&self) -> Option<Peer> {
        self.stream.peer()
    }

    pub fn send(&mut self, msg: &Message) {
        msg.encode(&mut self.write_buf);
    }

    /// The output buffer, for messages written in place.
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.write_buf
    }

    pub fn buffered(&self) -> usize {
        self.write_buf.len()
    }

    /// Sends what is buffered, then a FATAL error (`errors::send_fatal`):
    /// the session ends after it.
    pub async fn send_fatal(&mut self, err: &crate::protocol::SqlError) {
        if self.flush().await.is_ok() {
            super::errors::send_fatal(&mut self.stream, err).await;
        }
    }

    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.write_buf.is_empty() {
            let r = self.stream.write_all(&self.write_buf).await;
            self.write_buf.clear();
            r?;
            // TLS buffers a record until flushed.
            self.stream.flush().await?;
        }
        Ok(())
    }
}
