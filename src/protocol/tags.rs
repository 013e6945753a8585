//! Message tags of protocol v3, by the side that sends them. Frontend and
//! backend reuse letters (`S` is Sync from a client and ParameterStatus
//! from a server), so each side has its own module.

/// Tags of messages a client (or the proxy, towards PostgreSQL) sends.
pub mod frontend {
    pub const BIND: u8 = b'B';
    pub const CLOSE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub const FLUSH: u8 = b'H';
    pub const FUNCTION_CALL: u8 = b'F';
    pub const PARSE: u8 = b'P';
    /// PasswordMessage, SASLInitialResponse and SASLResponse share it.
    pub const PASSWORD: u8 = b'p';
    pub const QUERY: u8 = b'Q';
    pub const SYNC: u8 = b'S';
    pub const TERMINATE: u8 = b'X';
}

/// Tags of messages PostgreSQL (or the proxy, towards a client) sends.
pub mod backend {
    pub const AUTHENTICATION: u8 = b'R';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const BIND_COMPLETE: u8 = b'2';
    pub const CLOSE_COMPLETE: u8 = b'3';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_IN_RESPONSE: u8 = b'G';
    pub const COPY_OUT_RESPONSE: u8 = b'H';
    pub const COPY_BOTH_RESPONSE: u8 = b'W';
    pub const DATA_ROW: u8 = b'D';
    pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
    pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
    pub const NO_DATA: u8 = b'n';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const NOTIFICATION_RESPONSE: u8 = b'A';
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const PARSE_COMPLETE: u8 = b'1';
    pub const PORTAL_SUSPENDED: u8 = b's';
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ROW_DESCRIPTION: u8 = b'T';
}

/// What a Describe or Close names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

impl Target {
    pub const STATEMENT_BYTE: u8 = b'S';
    pub const PORTAL_BYTE: u8 = b'P';

    pub fn from_byte(b: u8) -> Option<Target> {
        match b {
            Target::STATEMENT_BYTE => Some(Target::Statement),
            Target::PORTAL_BYTE => Some(Target::Portal),
            _ => None,
        }
    }

    pub fn as_byte(self) -> u8 {
        match self {
            Target::Statement => Target::STATEMENT_BYTE,
            Target::Portal => Target::PORTAL_BYTE,
        }
    }
}

/// Authentication request codes (the first word of an Authentication message).
pub mod auth {
    pub const OK: i32 = 0;
    pub const CLEARTEXT_PASSWORD: i32 = 3;
    pub const MD5_PASSWORD: i32 = 5;
    pub const SASL: i32 = 10;
    pub const SASL_CONTINUE: i32 = 11;
    pub const SASL_FINAL: i32 = 12;
}

/// The words that open an untagged startup-phase packet.
pub mod startup {
    /// Protocol 3.0, as a StartupMessage's version word.
    pub const PROTOCOL_3: i32 = 3 << 16;
    pub const SSL_REQUEST: i32 = 80877103;
    pub const GSSENC_REQUEST: i32 = 80877104;
    pub const CANCEL_REQUEST: i32 = 80877102;
    /// One-byte answers to SSLRequest / GSSENCRequest.
    pub const ACCEPT: &[u8] = b"S";
    pub const DECLINE: &[u8] = b"N";
}

/// Frame tags of queenwire's internal channel, on which a queenwire
/// forwards ephemeral statements to the queue's owner
/// (`engine/ephemeral/wire.rs`). Not PostgreSQL's protocol.
pub mod internal {
    /// Handshake: the owner's nonce.
    pub const HELLO: u8 = b'H';
    /// Handshake: the caller's nonce and proof.
    pub const PROOF: u8 = b'A';
    /// Handshake: the owner's proof.
    pub const WELCOME: u8 = b'W';
    /// Handshake: the caller's proof was wrong.
    pub const REFUSED: u8 = b'X';
    pub const REQUEST: u8 = b'r';
    pub const CANCEL: u8 = b'c';
    pub const STOP: u8 = b's';
    /// Operations of a request.
    pub const PUSH: u8 = b'P';
    pub const FIT: u8 = b'F';
    pub const APPLY: u8 = b'A';
    pub const POP: u8 = b'O';
    pub const ACK: u8 = b'K';
    pub const RENEW: u8 = b'R';
    pub const COUNTS: u8 = b'C';
    /// Replies.
    pub const NOT_OWNER: u8 = b'N';
    pub const ERROR: u8 = b'E';
    pub const DONE: u8 = b'D';
    pub const SEQS: u8 = b'Q';
    pub const PUSHED: u8 = b'V';
    pub const DELIVERED: u8 = b'M';
    pub const STATUSES: u8 = b'S';
    pub const UNTIL: u8 = b'T';
}
