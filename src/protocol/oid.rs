//! The one table of PostgreSQL type OIDs the proxy names (pg_type.dat).

/// A PostgreSQL type OID.
pub type Oid = u32;

/// Unknown / unspecified (a Parse that leaves a parameter's type open).
pub const UNSPECIFIED: Oid = 0;
pub const BOOL: Oid = 16;
pub const BYTEA: Oid = 17;
pub const NAME: Oid = 19;
pub const INT8: Oid = 20;
pub const INT2: Oid = 21;
pub const INT4: Oid = 23;
pub const TEXT: Oid = 25;
pub const JSON: Oid = 114;
pub const UNKNOWN: Oid = 705;
pub const BPCHAR: Oid = 1042;
pub const VARCHAR: Oid = 1043;
pub const TIMESTAMP: Oid = 1114;
pub const TIMESTAMPTZ: Oid = 1184;
pub const UUID: Oid = 2950;
pub const JSONB: Oid = 3802;

/// `typlen` of a type, as RowDescription reports it (-1: variable length).
pub fn type_size(oid: Oid) -> i16 {
    match oid {
        BOOL => 1,
        INT2 => 2,
        INT4 => 4,
        INT8 | TIMESTAMP | TIMESTAMPTZ => 8,
        UUID => 16,
        _ => -1,
    }
}
