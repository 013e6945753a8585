//! Queue administration: CREATE/ALTER QUEUE (`configure_queue_v1`), DROP
//! QUEUE (`delete_queue_v1`), SEEK GROUP (`log_seek_group_v1`), DROP GROUP
//! (`log_drop_group_v1`). `rewrite::build::admin` builds each from its
//! statement and bound parameters.

use super::declare::calls;
use uuid::Uuid;

calls! {
    pub const CONFIGURE = "qw_configure_v1" {
        SELECT queen.configure_queue_v1;
        #[derive(Debug, Clone, PartialEq)]
        pub struct Configure {
            queue: String = TEXT,
            /// The JSON object of the settings, in each column's unit.
            options: String = TEXT::jsonb,
            mode: &'static str = TEXT,
            tenant: Uuid = UUID,
        }
        row () { outcome: TEXT }
    }

    pub const DELETE_QUEUE = "qw_delete_queue_v1" {
        SELECT queen.delete_queue_v1;
        pub struct DeleteQueue<'a> {
            queue: &'a str = TEXT,
            tenant: Uuid = UUID,
        }
        pub struct DeleteQueueRow {
            existed: Option<bool> = BOOL,
        }
    }

    pub const SEEK_GROUP = "qw_seek_v1" {
        SELECT queen.log_seek_group_v1;
        #[derive(Debug, Clone, PartialEq)]
        pub struct Seek {
            queue: String = TEXT,
            group: String = TEXT,
            partition: Option<String> = TEXT,
            target: &'static str = TEXT,
            /// Timestamp text, cast by PostgreSQL.
            at: Option<String> = TEXT::timestamptz,
            tenant: Uuid = UUID,
        }
        row () { partitions: INT4 }
    }

    pub const DROP_GROUP = "qw_drop_group_v1" {
        SELECT queen.log_drop_group_v1;
        #[derive(Debug, Clone, PartialEq)]
        pub struct DropGroup {
            queue: String = TEXT,
            group: String = TEXT,
            tenant: Uuid = UUID,
        }
        row () { partitions: INT4 }
    }

    pub const GROUP_SET_TYPE = "qw_group_set_type_v1" {
        SELECT queen.log_group_set_type_v1;
        /// ALTER GROUP … SET (ordered = …): one group's own type.
        #[derive(Debug, Clone, PartialEq)]
        pub struct GroupSetType {
            queue: String = TEXT,
            group: String = TEXT,
            ordered: bool = BOOL,
            tenant: Uuid = UUID,
        }
        row () { outcome: TEXT }
    }
}

/// How `configure_queue_v1` treats an existing or missing queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigureMode {
    Create,
    CreateIfNotExists,
    Alter,
}

impl ConfigureMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigureMode::Create => "create",
            ConfigureMode::CreateIfNotExists => "create_if_not_exists",
            ConfigureMode::Alter => "alter",
        }
    }
}
