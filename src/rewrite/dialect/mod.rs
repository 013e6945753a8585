//! The queenwire dialect grammar (placeholder until the parser lands).
