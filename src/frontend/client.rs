//! The client's socket: buffered reads of framed messages, buffered writes.

use crate::protocol::{read_message, FrameError, Message};
use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub struct Client {
    stream: TcpStream,
    read_buf: BytesMut,
    write_buf: BytesMut,
}

impl Client {
    pub fn new(stream: TcpStream) -> Client {
        Client {
            stream,
            read_buf: BytesMut::with_capacity(8192),
            write_buf: BytesMut::with_capacity(8192),
        }
    }

    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub async fn read(&mut self, max_len: usize) -> Result<Message, FrameError> {
        read_message(&mut self.stream, &mut self.read_buf, max_len).await
    }

    pub fn send(&mut self, msg: &Message) {
        msg.encode(&mut self.write_buf);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.write_buf.extend_from_slice(bytes);
    }

    pub fn buffered(&self) -> usize {
        self.write_buf.len()
    }

    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.write_buf.is_empty() {
            let r = self.stream.write_all(&self.write_buf).await;
            self.write_buf.clear();
            r?;
        }
        Ok(())
    }
}
