//! COPY FROM STDIN: the client's data goes to the backend until CopyDone
//! or CopyFail.

use super::dispatch::CLIENT_FLUSH_THRESHOLD;
use super::{canned, End, Session};
use crate::protocol::tags::frontend as tag;
use crate::protocol::FrameError;

impl Session {
    pub(super) async fn copy_in(&mut self) -> Result<(), End> {
        self.client.flush().await?;
        self.replies.copy_in_started();
        loop {
            let msg = match self.client.read(self.shared.config.max_message_size).await {
                Ok(msg) => msg,
                // Said, then the close, as outside COPY.
                Err(FrameError::TooLarge(len, max)) => {
                    return Err(self.fatal(canned::message_too_large(len, max)).await)
                }
                Err(e) => return Err(e.into()),
            };
            let done = matches!(msg.tag, tag::COPY_DONE | tag::COPY_FAIL);
            match msg.tag {
                tag::COPY_DATA | tag::COPY_DONE | tag::COPY_FAIL | tag::FLUSH | tag::SYNC => {
                    let Some(conn) = self.lease.conn_mut() else {
                        return Err(End::Fatal("COPY without a backend".into()));
                    };
                    conn.send(&msg);
                    if done || conn.unflushed_len() > CLIENT_FLUSH_THRESHOLD {
                        if let Err(e) = conn.flush().await {
                            return Err(self.backend_lost(e).await);
                        }
                    }
                }
                other => {
                    let err = canned::protocol_violation(format!(
                        "unexpected message type {other} during COPY from stdin"
                    ));
                    return Err(self.fatal(err).await);
                }
            }
            if done {
                return Ok(());
            }
        }
    }
}
