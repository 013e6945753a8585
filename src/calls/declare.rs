//! `calls!`: each call of a family declared once — the procedure, its
//! arguments with their Rust and PostgreSQL types, its result columns with
//! theirs — and from that one declaration the [`CallSpec`](super::CallSpec)
//! (SQL, parameter types, columns), the parameter struct and its
//! [`Call`](super::Call) impl, the row struct and its
//! [`FromRow`](super::FromRow) impl, and the family's `SPECS`, which
//! `calls::ALL` gathers (so every call is in it).
//!
//! ```text
//! calls! {
//!     /// A doc comment for the spec.
//!     pub const EXAMPLE = "qw_example_v1" {
//!         SELECT * FROM queen.example_v1;
//!         pub struct Example<'a> {
//!             queue: &'a str = TEXT,
//!             at: Option<String> = TEXT::timestamptz,
//!             tenant: Uuid = UUID,
//!         }
//!         #[derive(Debug, Clone, PartialEq)]
//!         pub struct ExampleRow {
//!             partition_name: Option<String> = TEXT,
//!             blob: Bytes = BYTEA,
//!         }
//!     }
//! }
//! ```
//!
//! gives `EXAMPLE`, a spec prepared as `qw_example_v1` with the SQL
//! `SELECT "partition_name", "blob" FROM queen.example_v1(p_queue => $1,
//! p_at => $2::timestamptz, p_tenant => $3)`, parameter types `[TEXT, TEXT,
//! UUID]` and the two columns; `Example` (its fields `pub`) with its `Call`;
//! `ExampleRow` with its `FromRow`. Argument `n` is the struct's field `n`
//! (its name with `p_` before it), the columns are the row's fields in order
//! (quoted, so a column may be called `offset`). The parts:
//!
//! - the shape: `SELECT * FROM queen.f;` (a set-returning function; or
//!   `SELECT * FROM queen.f(.., p_x => true);` to pass constants after the
//!   arguments), `SELECT queen.f;` (a scalar one, its one column named `AS`
//!   the row's field), or a string literal for SQL of another shape, whose
//!   `$n` follow the arguments' order;
//! - the arguments: `pub struct P { field: RustType = PGTYPE, … }` (or
//!   `pub struct P;` for none), each field optionally `field as arg` when
//!   the argument is named otherwise, and `::cast`s after its type; or
//!   `args(arg: PGTYPE, …);` when the parameter struct and its `Call` impl
//!   are written by hand beside the block;
//! - the row: `pub struct R { field: RustType = PGTYPE, … }`, each field
//!   optionally `field as column`, and `or default` when a NULL reads as the
//!   type's default (a `BYTEA` column is taken without a copy); or
//!   `row R { column: PGTYPE, … }` (`R` may be `()`) when the row type and
//!   its `FromRow` are written by hand.
//!
//! `tests/calls.rs` Parses and Describes what comes out against the schema.

/// Declares a family's calls (see the module's docs) and its `SPECS`.
macro_rules! calls {
    (@family [$($spec:ident)*]) => {
        /// Every call of this family (gathered into `calls::ALL`).
        pub const SPECS: &[&$crate::calls::CallSpec] = &[$(&$spec),*];
    };
    (@family [$($spec:ident)*]
        $(#[$m:meta])* pub const $SPEC:ident = $name:literal { $($body:tt)* }
        $($rest:tt)*
    ) => {
        $crate::calls::declare::call!(@shape [$(#[$m])*] $SPEC $name $($body)*);
        $crate::calls::declare::calls!(@family [$($spec)* $SPEC] $($rest)*);
    };
    ($($body:tt)*) => {
        $crate::calls::declare::calls!(@family [] $($body)*);
    };
}

/// One call of a `calls!` block, read part by part: its shape, its
/// arguments, its row; then the spec and the impls.
macro_rules! call {
    // The shape of the SQL.
    (@shape $m:tt $SPEC:ident $name:literal SELECT * FROM queen . $f:ident ; $($rest:tt)*) => {
        $crate::calls::declare::call!(@args $m $SPEC $name [rows $f []] $($rest)*);
    };
    (@shape $m:tt $SPEC:ident $name:literal
        SELECT * FROM queen . $f:ident ( .. $(, $fixed:ident => $value:literal)* ) ;
        $($rest:tt)*
    ) => {
        $crate::calls::declare::call!(@args $m $SPEC $name [rows $f [$($fixed $value)*]] $($rest)*);
    };
    (@shape $m:tt $SPEC:ident $name:literal SELECT queen . $f:ident ; $($rest:tt)*) => {
        $crate::calls::declare::call!(@args $m $SPEC $name [value $f] $($rest)*);
    };
    (@shape $m:tt $SPEC:ident $name:literal $sql:literal ; $($rest:tt)*) => {
        $crate::calls::declare::call!(@args $m $SPEC $name [sql $sql] $($rest)*);
    };

    // The arguments: a parameter struct, none, or only their names and types.
    (@args $m:tt $SPEC:ident $name:literal $shape:tt
        $(#[$pm:meta])*
        pub struct $P:ident $(<$lt:lifetime>)? {
            $( $(#[$fm:meta])* $field:ident $(as $arg:ident)? : $ty:ty = $pg:ident $(:: $cast:ident)* ),* $(,)?
        }
        $($rest:tt)*
    ) => {
        $(#[$pm])*
        pub struct $P $(<$lt>)? {
            $( $(#[$fm])* pub $field: $ty, )*
        }
        $crate::calls::declare::call!(@row $m $SPEC $name $shape
            [fields $P [$($lt)?] [$($field)*]]
            [$( [$($arg)? $field] $pg [$(:: $cast)*] )*]
            $($rest)*);
    };
    (@args $m:tt $SPEC:ident $name:literal $shape:tt
        $(#[$pm:meta])* pub struct $P:ident ;
        $($rest:tt)*
    ) => {
        $(#[$pm])*
        pub struct $P;
        $crate::calls::declare::call!(@row $m $SPEC $name $shape [unit $P] [] $($rest)*);
    };
    (@args $m:tt $SPEC:ident $name:literal $shape:tt
        args ( $( $arg:ident : $pg:ident $(:: $cast:ident)* ),* $(,)? ) ;
        $($rest:tt)*
    ) => {
        $crate::calls::declare::call!(@row $m $SPEC $name $shape [by_hand]
            [$( [$arg] $pg [$(:: $cast)*] )*]
            $($rest)*);
    };

    // The row: a row struct, or a type decoded by hand with its columns.
    (@row $m:tt $SPEC:ident $name:literal $shape:tt $call:tt $args:tt
        $(#[$rm:meta])*
        pub struct $R:ident {
            $( $(#[$fm:meta])* $field:ident $(as $column:ident)? : $ty:ty = $pg:ident $(or $null:ident)? ),* $(,)?
        }
    ) => {
        $(#[$rm])*
        pub struct $R {
            $( $(#[$fm])* pub $field: $ty, )*
        }
        impl $crate::calls::FromRow for $R {
            fn from_row(
                row: &$crate::calls::Row<'_>,
            ) -> Result<Self, $crate::calls::DecodeError> {
                Ok($R {
                    $( $field: $crate::calls::declare::call!(
                        @read row [$($column)? $field] $pg [$($null)?]
                    ), )*
                })
            }
        }
        $crate::calls::declare::call!(@emit $m $SPEC $name $shape $call $args [$R]
            [$( [$($column)? $field] $pg )*]);
    };
    (@row $m:tt $SPEC:ident $name:literal $shape:tt $call:tt $args:tt
        row $R:ty { $( $column:ident : $pg:ident ),* $(,)? }
    ) => {
        $crate::calls::declare::call!(@emit $m $SPEC $name $shape $call $args [$R]
            [$( [$column] $pg )*]);
    };

    // The spec and the parameter struct's `Call`.
    (@emit [$(#[$m:meta])*] $SPEC:ident $name:literal $shape:tt $call:tt
        [$( $arg:tt $pg:ident $cast:tt )*] [$R:ty] [$( $column:tt $cpg:ident )*]
    ) => {
        $(#[$m])*
        pub const $SPEC: $crate::calls::CallSpec = $crate::calls::CallSpec {
            name: $name,
            sql: $crate::calls::declare::call!(@sql $shape [$( $arg $cast )*] [$($column)*]),
            params: &[$( ::tokio_postgres::types::Type::$pg ),*],
            columns: &[$(
                $crate::calls::column(
                    $crate::calls::declare::call!(@name $column),
                    ::tokio_postgres::types::Type::$cpg,
                )
            ),*],
        };
        $crate::calls::declare::call!(@impl $SPEC [$R] $call);
    };
    (@impl $SPEC:ident [$R:ty] [fields $P:ident [$($lt:lifetime)?] [$($field:ident)*]]) => {
        impl $(<$lt>)? $crate::calls::Call for $P $(<$lt>)? {
            const SPEC: &'static $crate::calls::CallSpec = &$SPEC;
            type Row = $R;
            fn params(&self) -> Vec<&(dyn ::tokio_postgres::types::ToSql + Sync)> {
                vec![$( &self.$field ),*]
            }
        }
    };
    (@impl $SPEC:ident [$R:ty] [unit $P:ident]) => {
        impl $crate::calls::Call for $P {
            const SPEC: &'static $crate::calls::CallSpec = &$SPEC;
            type Row = $R;
            fn params(&self) -> Vec<&(dyn ::tokio_postgres::types::ToSql + Sync)> {
                Vec::new()
            }
        }
    };
    (@impl $SPEC:ident [$R:ty] [by_hand]) => {};

    // One cell of a row, by its column's name.
    (@read $row:ident [$column:ident $($field:ident)?] BYTEA []) => {
        $row.bytes(stringify!($column))?.into()
    };
    (@read $row:ident [$column:ident $($field:ident)?] BYTEA [default]) => {
        $row.bytes_or_empty(stringify!($column))?.into()
    };
    (@read $row:ident [$column:ident $($field:ident)?] $pg:ident []) => {
        $row.get(stringify!($column))?
    };
    (@read $row:ident [$column:ident $($field:ident)?] $pg:ident [default]) => {
        $row.get::<Option<_>>(stringify!($column))?.unwrap_or_default()
    };

    // The SQL.
    (@sql [rows $f:ident [$($fixed:ident $value:literal)*]] [$($args:tt)*] [$($column:tt)*]) => {
        concat!(
            "SELECT ",
            $crate::calls::declare::call!(@columns $($column)*),
            " FROM queen.",
            stringify!($f),
            "(",
            $crate::calls::declare::call!(@arguments $($args)*),
            $(", ", stringify!($fixed), " => ", stringify!($value),)*
            ")"
        )
    };
    (@sql [value $f:ident] [$($args:tt)*] [$column:tt]) => {
        concat!(
            "SELECT queen.",
            stringify!($f),
            "(",
            $crate::calls::declare::call!(@arguments $($args)*),
            ") AS \"",
            $crate::calls::declare::call!(@name $column),
            "\""
        )
    };
    (@sql [sql $sql:literal] $args:tt $columns:tt) => {
        $sql
    };
    (@columns $first:tt $($column:tt)*) => {
        concat!(
            "\"", $crate::calls::declare::call!(@name $first), "\""
            $(, ", \"", $crate::calls::declare::call!(@name $column), "\"")*
        )
    };
    // `p_a => $1, p_b => $2::cast, …`: each argument takes the next number
    // off the list (so a call has at most 40).
    (@arguments $($args:tt)*) => {
        $crate::calls::declare::call!(@numbered [
            1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20
            21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40
        ] $($args)*)
    };
    (@numbered [$($n:literal)*]) => { "" };
    (@numbered [$n:literal $($more:literal)*] $arg:tt [$(:: $cast:ident)*]) => {
        concat!(
            "p_", $crate::calls::declare::call!(@name $arg), " => $", $n
            $(, "::", stringify!($cast))*
        )
    };
    (@numbered [$n:literal $($more:literal)*] $arg:tt [$(:: $cast:ident)*] $($rest:tt)+) => {
        concat!(
            "p_", $crate::calls::declare::call!(@name $arg), " => $", $n
            $(, "::", stringify!($cast))*,
            ", ",
            $crate::calls::declare::call!(@numbered [$($more)*] $($rest)+)
        )
    };
    // The name a column or argument goes by: the one after `as`, or the field's.
    (@name [$name:ident $($field:ident)?]) => {
        stringify!($name)
    };
}

pub(crate) use {call, calls};
