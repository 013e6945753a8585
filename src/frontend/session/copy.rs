//! COPY FROM STDIN: the client's data goes to the backend until CopyDone
//! or CopyFail.

use super::dispatch::CLIENT_FLUSH_THRESHOLD;
use super::{canned, End, Session};
use crate::protocol::tags::frontend as tag;
use crate::protocol::{FrameError, Message};

impl Session {
    /// A copy message between statements. It may be for a COPY FROM STDIN
    /// of the pipeline that has not answered yet (the client sent its data
    /// without waiting for CopyInResponse, as PostgreSQL allows): the
    /// replies owed are read first, and the COPY they start takes it.
    /// Outside a COPY it is ignored, as PostgreSQL ignores it.
    pub(super) async fn copy_message(&mut self, msg: Message) -> Result<(), End> {
        if !self.replies.owed() || !self.lease.held() || self.replies.skipping() {
            return Ok(());
        }
        self.copy_ahead = Some(msg);
        let relayed = self.relay_earlier_replies().await;
        self.copy_ahead = None;
        relayed
    }

    pub(super) async fn copy_in(&mut self) -> Result<(), End> {
        self.client.flush().await?;
        if self.replies.copy_in_started() {
            // The backend answers those messages with an error and ends
            // the connection; its replies, not the client, come next.
            self.copy_ahead = None;
            return Ok(());
        }
        loop {
            let msg = match self.copy_ahead.take() {
                Some(msg) => msg,
                None => match self.client.read(self.shared.config.max_message_size).await {
                    Ok(msg) => msg,
                    // Said, then the close, as outside COPY.
                    Err(FrameError::TooLarge(len, max)) => {
                        return Err(self.fatal(canned::message_too_large(len, max)).await)
                    }
                    Err(e) => return Err(e.into()),
                },
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
