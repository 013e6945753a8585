//! Reply sequencing: what the backend (or the proxy) still owes the client,
//! in the order the client asked. One entry per message forwarded; replies
//! arrive in order; an ErrorResponse in the extended protocol ends
//! everything up to the next Sync; replies the proxy makes itself wait in
//! the same queue so the client sees every answer in order. No I/O here:
//! the session sends what this type says to send.
//!
//! The session applies what a message does to its own bookkeeping (a
//! statement prepared or closed, a portal bound) when the message arrives,
//! so later messages of the pipeline see it; an entry may carry the undo
//! of that change (`U`), handed back when an earlier error makes the
//! backend skip the message, as PostgreSQL skips it.

use crate::protocol::tags::backend as tag;
use crate::protocol::{Message, TxStatus};
use std::collections::VecDeque;
use std::sync::Arc;

/// A reply still owed to the client; `U` undoes what its message did to
/// the session's bookkeeping.
#[derive(Debug)]
pub enum Expect<U> {
    /// ParseComplete. `forward: false` for a Parse the proxy injected;
    /// `registers` names the proxy-global statement it creates.
    Parse {
        forward: bool,
        registers: Option<Arc<str>>,
        undo: Option<U>,
    },
    Bind,
    Close,
    /// ParameterDescription, then RowDescription or NoData.
    DescribeStatement,
    /// RowDescription or NoData.
    DescribePortal,
    /// Rows, then CommandComplete, EmptyQueryResponse or PortalSuspended.
    Execute,
    /// ReadyForQuery.
    Sync,
    /// A simple Query: everything up to ReadyForQuery.
    Query,
    /// A simple Query the proxy has answered already (a `BEGIN` outside a
    /// block, `session::simple`): its replies up to ReadyForQuery are not
    /// the client's.
    Answered,
    /// A reply produced by the proxy, sent when its turn comes.
    Local(Message, Option<U>),
}

/// What a backend message means for the session.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen<U> {
    /// Pass it to the client.
    Relay,
    /// The reply to a Parse the proxy injected: the client never asked.
    Swallow,
    /// Pass it on; then the client's COPY data goes to the backend.
    CopyIn,
    /// Pass it on; the backend's new ParameterStatus value.
    ParameterStatus,
    /// Pass it on (ReadyForQuery): the exchange ended in this status.
    Ready(TxStatus),
    /// The ReadyForQuery of an exchange the proxy answered ahead: not the
    /// client's; the backend's status now.
    AnsweredReady(TxStatus),
    /// An error of an exchange the proxy answered ahead as a success: the
    /// client was told something PostgreSQL did not do.
    AnsweredFailed,
    /// Pass it on (ErrorResponse): the backend skips to Sync, so the
    /// replies owed before it will never come; these proxy-global
    /// statements were never created, and these changes of the skipped
    /// messages must be undone, in this order (the latest first). `failing`
    /// is the change of the message that failed, when it was a Parse: it
    /// ran as far as dropping an unnamed statement it replaces.
    Failed {
        never_created: Vec<Arc<str>>,
        undo: Vec<U>,
        failing: Option<U>,
    },
}

#[derive(Debug)]
pub struct Replies<U> {
    pending: VecDeque<Expect<U>>,
    /// After an error in the extended protocol, messages are discarded
    /// until Sync, as PostgreSQL does.
    skipping: bool,
    /// The replies owed stay in the backend's output until the client's
    /// next Sync or Flush reaches it (see `copy_in_started`).
    held_for_client: bool,
}

impl<U> Default for Replies<U> {
    fn default() -> Self {
        Replies {
            pending: VecDeque::new(),
            skipping: false,
            held_for_client: false,
        }
    }
}

impl<U> Replies<U> {
    /// A message went to the backend; `expect` is its reply.
    pub fn expect(&mut self, expect: Expect<U>) {
        if matches!(expect, Expect::Sync) {
            self.held_for_client = false;
        }
        self.pending.push_back(expect);
    }

    /// A Flush of the proxy's own went to the backend: what it owes comes.
    pub fn flush_sent(&mut self) {
        self.held_for_client = false;
    }

    /// Whether the replies owed wait for the client's next Sync or Flush:
    /// reading them before it sends one would wait for good.
    pub fn held_for_client(&self) -> bool {
        self.held_for_client && self.owed()
    }

    /// A reply the proxy makes itself: `Some` when it is the client's turn
    /// to get it now, else it waits behind the backend's replies (with the
    /// undo of what its message did, should an error before it come).
    pub fn local(&mut self, msg: Message, undo: Option<U>) -> Option<Message> {
        if self.pending.is_empty() {
            Some(msg)
        } else {
            self.pending.push_back(Expect::Local(msg, undo));
            None
        }
    }

    /// An error the proxy reports itself: like `local`, and the rest of the
    /// pipeline up to Sync is skipped.
    pub fn local_error(&mut self, error: Message) -> Option<Message> {
        self.skipping = true;
        self.local(error, None)
    }

    /// The next proxy reply whose turn has come.
    pub fn next_local(&mut self) -> Option<Message> {
        match self.pending.front() {
            Some(Expect::Local(..)) => match self.pending.pop_front() {
                Some(Expect::Local(m, _)) => Some(m),
                _ => None,
            },
            _ => None,
        }
    }

    /// Replies are still owed (by the backend or queued locally).
    pub fn owed(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn skipping(&self) -> bool {
        self.skipping
    }

    /// Sync (or the end of a simple query) ends the skipping.
    pub fn end_skip(&mut self) {
        self.skipping = false;
    }

    /// The backend connection is gone: nothing more will come.
    pub fn lost(&mut self) {
        self.pending.clear();
        self.held_for_client = false;
    }

    /// COPY FROM STDIN started. In the extended protocol the backend
    /// ignores a Sync (or Flush) that reaches it during COPY, so the
    /// replies queued behind this Execute will not come; after CopyDone or
    /// CopyFail it goes on with the client's next messages, and, as after
    /// any Execute, sends nothing until a Sync or Flush of the client's
    /// (libpq sends a Sync with CopyDone) asks it to.
    ///
    /// Whether messages of the client's other than Sync went to the
    /// backend behind the Execute (sent without waiting for its answer):
    /// PostgreSQL, reading them during the COPY, fails the connection.
    pub fn copy_in_started(&mut self) -> bool {
        if !matches!(self.pending.front(), Some(Expect::Execute)) {
            return false;
        }
        let behind = self
            .pending
            .iter()
            .skip(1)
            .any(|e| !matches!(e, Expect::Sync | Expect::Local(..)));
        if behind {
            // Its error comes at once, and the connection's end.
            return true;
        }
        self.pending.truncate(1);
        self.held_for_client = true;
        false
    }

    /// The next replies are those of an exchange the proxy answered ahead.
    pub fn answered_ahead(&self) -> bool {
        matches!(self.pending.front(), Some(Expect::Answered))
    }

    /// The exchange answered ahead at the front, and nothing behind it, is
    /// no longer this queue's to read (the connection reads its replies
    /// itself: `BackendConn::take_answered_begin`). Whether it was.
    pub fn hand_over_answered(&mut self) -> bool {
        if self.pending.len() == 1 && self.answered_ahead() {
            self.pending.clear();
            true
        } else {
            false
        }
    }

    /// One message from the backend.
    pub fn on_backend(&mut self, msg: &Message) -> Seen<U> {
        if self.answered_ahead() {
            return match msg.tag {
                tag::READY_FOR_QUERY => {
                    self.pending.pop_front();
                    Seen::AnsweredReady(TxStatus::from_ready_body(&msg.body))
                }
                tag::ERROR_RESPONSE => Seen::AnsweredFailed,
                tag::PARAMETER_STATUS => Seen::ParameterStatus,
                // What is not a reply still reaches the client.
                tag::NOTICE_RESPONSE | tag::NOTIFICATION_RESPONSE => Seen::Relay,
                _ => Seen::Swallow,
            };
        }
        match msg.tag {
            tag::ERROR_RESPONSE => {
                if matches!(self.pending.front(), Some(Expect::Query)) {
                    return Seen::Relay;
                }
                let mut never_created = Vec::new();
                let mut undo = Vec::new();
                let mut failing = None;
                let mut first = true;
                while let Some(front) = self.pending.front() {
                    if matches!(front, Expect::Sync) {
                        break;
                    }
                    match self.pending.pop_front() {
                        Some(Expect::Parse {
                            registers, undo: u, ..
                        }) => {
                            never_created.extend(registers);
                            if first {
                                failing = u;
                            } else {
                                undo.extend(u);
                            }
                        }
                        Some(Expect::Local(_, u)) => undo.extend(u),
                        _ => {}
                    }
                    first = false;
                }
                undo.reverse();
                self.skipping = true;
                Seen::Failed {
                    never_created,
                    undo,
                    failing,
                }
            }
            tag::PARAMETER_STATUS => Seen::ParameterStatus,
            tag::PARSE_COMPLETE => match self.pending.pop_front() {
                Some(Expect::Parse { forward: false, .. }) => Seen::Swallow,
                _ => Seen::Relay,
            },
            tag::BIND_COMPLETE | tag::CLOSE_COMPLETE | tag::NO_DATA => {
                self.pending.pop_front();
                Seen::Relay
            }
            tag::ROW_DESCRIPTION => {
                if matches!(
                    self.pending.front(),
                    Some(Expect::DescribeStatement | Expect::DescribePortal)
                ) {
                    self.pending.pop_front();
                }
                Seen::Relay
            }
            tag::COMMAND_COMPLETE | tag::EMPTY_QUERY_RESPONSE | tag::PORTAL_SUSPENDED => {
                if matches!(self.pending.front(), Some(Expect::Execute)) {
                    self.pending.pop_front();
                }
                Seen::Relay
            }
            tag::COPY_IN_RESPONSE => Seen::CopyIn,
            tag::READY_FOR_QUERY => {
                self.pending.pop_front();
                Seen::Ready(TxStatus::from_ready_body(&msg.body))
            }
            // ParameterDescription, rows, notices, notifications, COPY OUT
            // data and anything else: pass along.
            _ => Seen::Relay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{self, SqlError};

    fn msg(t: u8) -> Message {
        crate::protocol::empty(t)
    }

    fn ready(status: TxStatus) -> Message {
        protocol::ready_for_query(status)
    }

    fn error() -> Message {
        SqlError::error(crate::protocol::SqlState::UNIQUE_VIOLATION, "duplicate key").to_message()
    }

    /// Feeds backend messages in order and collects what the client gets:
    /// relayed messages and the proxy's own replies, in order.
    fn run(replies: &mut Replies<&str>, backend: &[Message]) -> Vec<u8> {
        let mut client = Vec::new();
        for m in backend {
            while let Some(local) = replies.next_local() {
                client.push(local.tag);
            }
            match replies.on_backend(m) {
                Seen::Swallow => {}
                _ => client.push(m.tag),
            }
        }
        while let Some(local) = replies.next_local() {
            client.push(local.tag);
        }
        client
    }

    #[test]
    fn simple_query_is_owed_until_ready_for_query() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Query);
        let got = run(
            &mut r,
            &[
                msg(tag::ROW_DESCRIPTION),
                msg(tag::DATA_ROW),
                msg(tag::COMMAND_COMPLETE),
            ],
        );
        assert_eq!(got, b"TDC");
        assert!(r.owed());
        // An error inside a simple query ends nothing: ReadyForQuery follows.
        assert!(matches!(r.on_backend(&error()), Seen::Relay));
        assert_eq!(
            r.on_backend(&ready(TxStatus::Idle)),
            Seen::Ready(TxStatus::Idle)
        );
        assert!(!r.owed());
        assert!(!r.skipping());
    }

    #[test]
    fn an_exchange_answered_ahead_is_swallowed_up_to_its_ready_for_query() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Answered);
        r.expect(Expect::Query);
        assert!(r.answered_ahead());
        assert_eq!(r.on_backend(&msg(tag::COMMAND_COMPLETE)), Seen::Swallow);
        assert_eq!(r.on_backend(&msg(tag::NOTICE_RESPONSE)), Seen::Relay);
        assert_eq!(
            r.on_backend(&ready(TxStatus::InBlock)),
            Seen::AnsweredReady(TxStatus::InBlock)
        );
        assert!(!r.answered_ahead());
        // The next exchange's replies are the client's.
        let got = run(
            &mut r,
            &[msg(tag::COMMAND_COMPLETE), ready(TxStatus::InBlock)],
        );
        assert_eq!(got, b"CZ");
        assert!(!r.owed());

        let mut r = Replies::<&str>::default();
        r.expect(Expect::Answered);
        assert_eq!(r.on_backend(&error()), Seen::AnsweredFailed);
    }

    #[test]
    fn extended_pipeline_pops_one_entry_per_reply() {
        let mut r = Replies::<&str>::default();
        for e in [
            Expect::Parse {
                forward: true,
                registers: None,
                undo: None,
            },
            Expect::Bind,
            Expect::DescribePortal,
            Expect::Execute,
            Expect::Sync,
        ] {
            r.expect(e);
        }
        let got = run(
            &mut r,
            &[
                msg(tag::PARSE_COMPLETE),
                msg(tag::BIND_COMPLETE),
                msg(tag::ROW_DESCRIPTION),
                msg(tag::DATA_ROW),
                msg(tag::COMMAND_COMPLETE),
                ready(TxStatus::InBlock),
            ],
        );
        assert_eq!(got, b"12TDCZ");
        assert!(!r.owed());
    }

    #[test]
    fn the_failing_parse_s_change_is_handed_back_apart() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Parse {
            forward: true,
            registers: Some(Arc::from("qw_s3")),
            undo: Some("unprepare unnamed"),
        });
        r.expect(Expect::Parse {
            forward: true,
            registers: None,
            undo: Some("unprepare s2"),
        });
        r.expect(Expect::Sync);
        assert_eq!(
            r.on_backend(&error()),
            Seen::Failed {
                never_created: vec![Arc::from("qw_s3")],
                undo: vec!["unprepare s2"],
                failing: Some("unprepare unnamed"),
            }
        );
    }

    #[test]
    fn error_mid_pipeline_skips_to_sync_and_forgets_statements_never_created() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Bind);
        r.expect(Expect::Execute);
        r.expect(Expect::Parse {
            forward: true,
            registers: Some(Arc::from("qw_s1")),
            undo: None,
        });
        r.expect(Expect::Bind);
        r.expect(Expect::Sync);
        assert_eq!(r.on_backend(&msg(tag::BIND_COMPLETE)), Seen::Relay);
        assert_eq!(
            r.on_backend(&error()),
            Seen::Failed {
                never_created: vec![Arc::from("qw_s1")],
                undo: vec![],
                failing: None,
            }
        );
        assert!(r.skipping());
        assert_eq!(
            r.on_backend(&ready(TxStatus::Failed)),
            Seen::Ready(TxStatus::Failed)
        );
        assert!(!r.owed());
        r.end_skip();
        assert!(!r.skipping());
    }

    #[test]
    fn portal_suspended_ends_an_execute() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Execute);
        r.expect(Expect::Execute);
        r.expect(Expect::Sync);
        let got = run(
            &mut r,
            &[
                msg(tag::DATA_ROW),
                msg(tag::PORTAL_SUSPENDED),
                msg(tag::DATA_ROW),
                msg(tag::COMMAND_COMPLETE),
                ready(TxStatus::InBlock),
            ],
        );
        assert_eq!(got, b"DsDCZ");
        assert!(!r.owed());
    }

    #[test]
    fn copy_in_in_the_extended_protocol_drops_what_queued_behind_the_execute() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Bind);
        r.expect(Expect::Execute);
        r.expect(Expect::Sync);
        assert_eq!(r.on_backend(&msg(tag::BIND_COMPLETE)), Seen::Relay);
        assert_eq!(r.on_backend(&msg(tag::COPY_IN_RESPONSE)), Seen::CopyIn);
        assert!(!r.copy_in_started());
        // The Execute's reply comes once the client's own Sync after
        // CopyDone reaches the backend, with its ReadyForQuery.
        assert!(r.owed());
        assert!(r.held_for_client());
        r.expect(Expect::Sync);
        assert!(!r.held_for_client());
        assert_eq!(r.on_backend(&msg(tag::COMMAND_COMPLETE)), Seen::Relay);
        assert!(r.owed());
        assert_eq!(
            r.on_backend(&ready(TxStatus::Idle)),
            Seen::Ready(TxStatus::Idle)
        );
        assert!(!r.owed());
    }

    #[test]
    fn an_injected_parse_is_answered_to_nobody() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Parse {
            forward: false,
            registers: Some(Arc::from("qw_s2")),
            undo: None,
        });
        r.expect(Expect::Bind);
        r.expect(Expect::Sync);
        let got = run(
            &mut r,
            &[
                msg(tag::PARSE_COMPLETE),
                msg(tag::BIND_COMPLETE),
                ready(TxStatus::Idle),
            ],
        );
        assert_eq!(got, b"2Z");
    }

    #[test]
    fn what_the_skipped_messages_did_is_undone_latest_first() {
        let mut r = Replies::<&str>::default();
        r.expect(Expect::Execute);
        // Parse s1 (forwarded), Close s1 and Bind of a dialect portal
        // (answered locally) after the failing Execute.
        r.expect(Expect::Parse {
            forward: true,
            registers: Some(Arc::from("qw_s9")),
            undo: Some("unprepare s1"),
        });
        assert!(r
            .local(protocol::close_complete(), Some("reopen s1"))
            .is_none());
        assert!(r
            .local(protocol::bind_complete(), Some("unbind p"))
            .is_none());
        r.expect(Expect::Sync);
        assert_eq!(
            r.on_backend(&error()),
            Seen::Failed {
                never_created: vec![Arc::from("qw_s9")],
                undo: vec!["unbind p", "reopen s1", "unprepare s1"],
                failing: None,
            }
        );
        assert!(r.next_local().is_none());
        assert_eq!(
            r.on_backend(&ready(TxStatus::Idle)),
            Seen::Ready(TxStatus::Idle)
        );
        assert!(!r.owed());
    }

    #[test]
    fn local_replies_wait_their_turn() {
        let mut r = Replies::<&str>::default();
        // Nothing owed: a local reply goes out at once.
        assert!(r.local(protocol::parse_complete(), None).is_some());
        r.expect(Expect::Bind);
        assert!(r.local(protocol::close_complete(), None).is_none());
        assert!(r.local_error(error()).is_none());
        assert!(r.skipping());
        r.expect(Expect::Sync);
        let got = run(&mut r, &[msg(tag::BIND_COMPLETE), ready(TxStatus::Idle)]);
        assert_eq!(got, b"23EZ");
    }
}
