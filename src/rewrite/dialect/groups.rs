//! Consumer-group detail: `SHOW GROUP grp ON queue` and
//! `SHOW LAGGING PARTITIONS ON queue [GROUP grp] [OVER duration]`, and the
//! group changes `ALTER GROUP grp ON queue SUBSCRIBE FROM …` and
//! `ALTER GROUP grp ON queue SET (ordered = true | false)`.
//! (`SHOW GROUPS` is in `show.rs`.)
//!
//! Neither SHOW is PostgreSQL: `GROUP` is a reserved word there, and its
//! `SHOW` takes one configuration name, so `SHOW lagging partitions` is a
//! syntax error. `ALTER GROUP role ADD USER …` / `DROP USER` / `RENAME TO`
//! is PostgreSQL's (roles); it never has `ON` after the role, so the
//! dialect's form requires `ON queue` and everything else passes through
//! (`mod.rs` decides on the first four words).

use super::cursor::{Cursor, Result};
use super::error::{ParseError, SqlState};
use super::options::{self, OptionValue, QueueOption, QueueSetting};
use super::pop::{parse_subscribe_from, SubscribeFrom};
use super::value::{Name, ParamTypes, Value};
use super::{oid, Column};
use std::time::Duration;

/// One row per partition of the queue, by partition name.
pub const GROUP_COLUMNS: &[Column] = &[
    Column::new("partition", oid::TEXT),
    Column::new("cursor_offset", oid::INT8),
    Column::new("last_offset", oid::INT8),
    Column::new("lag", oid::INT8),
    Column::new("oldest_pending_at", oid::TIMESTAMPTZ),
    Column::new("lease_expires_at", oid::TIMESTAMPTZ),
    Column::new("lease_from", oid::INT8),
    Column::new("lease_to", oid::INT8),
    Column::new("retry_count", oid::INT4),
    Column::new("blocked_until", oid::TIMESTAMPTZ),
    Column::new("last_claimed_at", oid::TIMESTAMPTZ),
];

/// One row per (group, partition) over the threshold, longest wait first.
pub const LAGGING_COLUMNS: &[Column] = &[
    Column::new("group", oid::TEXT),
    Column::new("partition", oid::TEXT),
    Column::new("lag", oid::INT8),
    Column::new("oldest_pending_at", oid::TIMESTAMPTZ),
    Column::new("time_lag_seconds", oid::INT8),
];

/// `SHOW LAGGING PARTITIONS` without `OVER`.
pub const DEFAULT_OVER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupDetail {
    Group {
        group: Name,
        queue: Name,
    },
    Lagging {
        queue: Name,
        group: Option<Name>,
        /// [`DEFAULT_OVER`] when not written.
        over: Value<Duration>,
    },
}

impl GroupDetail {
    pub fn columns(&self) -> &'static [Column] {
        match self {
            GroupDetail::Group { .. } => GROUP_COLUMNS,
            GroupDetail::Lagging { .. } => LAGGING_COLUMNS,
        }
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        match self {
            GroupDetail::Group { group, queue } => {
                params.note(group, oid::TEXT);
                params.note(queue, oid::TEXT);
            }
            GroupDetail::Lagging { queue, group, over } => {
                params.note(queue, oid::TEXT);
                params.note_all(group, oid::TEXT);
                params.note(over, oid::TEXT);
            }
        }
    }

    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<GroupDetail> {
        cursor.expect_keyword("SHOW")?;
        if cursor.eat_keyword("GROUP") {
            let group = cursor.name("group")?;
            cursor.expect_keyword("ON")?;
            let queue = cursor.name("queue")?;
            return Ok(GroupDetail::Group { group, queue });
        }
        cursor.expect_keyword("LAGGING")?;
        cursor.expect_keyword("PARTITIONS")?;
        cursor.expect_keyword("ON")?;
        let queue = cursor.name("queue")?;
        let mut group = None;
        let mut over = None;
        loop {
            let clause = cursor.peek().clone();
            if cursor.eat_keyword("GROUP") {
                cursor.once(group.is_some(), &clause, "GROUP")?;
                group = Some(cursor.name("group")?);
            } else if cursor.eat_keyword("OVER") {
                cursor.once(over.is_some(), &clause, "OVER")?;
                over = Some(cursor.duration("OVER")?);
            } else {
                break;
            }
        }
        Ok(GroupDetail::Lagging {
            queue,
            group,
            over: over.unwrap_or(Value::Literal(DEFAULT_OVER)),
        })
    }
}

/// `ALTER GROUP grp ON queue SUBSCRIBE FROM (BEGINNING | NOW | 'timestamp')`:
/// where the group starts on partitions it has not met yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterGroup {
    pub group: Name,
    pub queue: Name,
    pub change: GroupChange,
}

/// What `ALTER GROUP g ON q` changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupChange {
    /// `SUBSCRIBE FROM …`: where the group's cursors start.
    Subscribe(SubscribeFrom),
    /// `SET (ordered = …)`: the group's own type (a boolean literal or a
    /// parameter read as one).
    Ordered(Value<OptionValue>),
}

impl AlterGroup {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<AlterGroup> {
        cursor.expect_keyword("ALTER")?;
        cursor.expect_keyword("GROUP")?;
        let group = cursor.name("group")?;
        cursor.expect_keyword("ON")?;
        let queue = cursor.name("queue")?;
        let change = if cursor.eat_keyword("SET") {
            let at = cursor.position(cursor.peek());
            let mut settings = options::parse_settings(cursor)?;
            match (settings.pop(), settings.is_empty()) {
                (
                    Some(QueueSetting {
                        option: QueueOption::Ordered,
                        value,
                    }),
                    true,
                ) => GroupChange::Ordered(value),
                _ => {
                    return Err(ParseError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        "ALTER GROUP … SET takes one option: ordered = true | false",
                    )
                    .at(at))
                }
            }
        } else {
            cursor.expect_keyword("SUBSCRIBE")?;
            cursor.expect_keyword("FROM")?;
            GroupChange::Subscribe(parse_subscribe_from(cursor)?)
        };
        Ok(AlterGroup {
            group,
            queue,
            change,
        })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.group, oid::TEXT);
        params.note(&self.queue, oid::TEXT);
        match &self.change {
            GroupChange::Subscribe(SubscribeFrom::Timestamp(timestamp)) => {
                params.note(timestamp, oid::TIMESTAMPTZ)
            }
            GroupChange::Ordered(value) => params.note(value, oid::BOOL),
            GroupChange::Subscribe(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit, ok};
    use super::super::{parse, Statement};
    use super::*;

    #[test]
    fn show_group_names_a_group_on_a_queue() {
        let statement = ok("SHOW GROUP billing ON orders");
        assert_eq!(
            statement,
            Statement::GroupDetail(GroupDetail::Group {
                group: lit("billing"),
                queue: lit("orders")
            })
        );
        assert_eq!(statement.columns(), GROUP_COLUMNS);
        assert_eq!(error("SHOW GROUP billing orders").0, "42601");
        assert_eq!(
            ok("SHOW GROUP $1 ON $2").param_types(),
            vec![oid::TEXT, oid::TEXT]
        );
    }

    #[test]
    fn show_lagging_partitions_takes_group_and_over_in_any_order() {
        let statement = ok("SHOW LAGGING PARTITIONS ON q OVER '5m' GROUP g");
        assert_eq!(
            statement,
            Statement::GroupDetail(GroupDetail::Lagging {
                queue: lit("q"),
                group: Some(lit("g")),
                over: Value::Literal(Duration::from_secs(300)),
            })
        );
        assert_eq!(statement.columns(), LAGGING_COLUMNS);
        let Statement::GroupDetail(GroupDetail::Lagging { over, group, .. }) =
            ok("show lagging partitions on q")
        else {
            panic!()
        };
        assert_eq!((over, group), (Value::Literal(DEFAULT_OVER), None));
        assert_eq!(error("SHOW LAGGING PARTITIONS q").0, "42601");
        assert_eq!(error("SHOW LAGGING PARTITIONS ON q OVER 'soon'").0, "22P02");
        assert_eq!(
            error("SHOW LAGGING PARTITIONS ON q OVER 1 OVER 2").0,
            "42601"
        );
    }

    #[test]
    fn alter_group_on_a_queue_changes_its_subscription() {
        let statement = ok("ALTER GROUP billing ON orders SUBSCRIBE FROM NOW;");
        assert_eq!(
            statement,
            Statement::AlterGroup(AlterGroup {
                group: lit("billing"),
                queue: lit("orders"),
                change: GroupChange::Subscribe(SubscribeFrom::Now),
            })
        );
        assert!(statement.columns().is_empty());
        assert_eq!(statement.command_tag(0), "ALTER GROUP");
        let Statement::AlterGroup(a) = ok("alter group g on q subscribe from timestamp $1") else {
            panic!()
        };
        assert_eq!(
            a.change,
            GroupChange::Subscribe(SubscribeFrom::Timestamp(Value::Param(1)))
        );
        assert_eq!(
            ok("ALTER GROUP $1 ON $2 SUBSCRIBE FROM $3").param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TIMESTAMPTZ]
        );
        ok("ALTER GROUP g ON q SUBSCRIBE FROM '2026-01-01 00:00:00+00'");
        ok("ALTER GROUP g ON q SUBSCRIBE FROM BEGINNING");
        assert_eq!(error("ALTER GROUP g ON q").0, "42601");
        let Statement::AlterGroup(a) = ok("ALTER GROUP workers ON jobs SET (ordered = false)")
        else {
            panic!()
        };
        assert_eq!(
            a.change,
            GroupChange::Ordered(Value::Literal(OptionValue::Boolean(false)))
        );
        assert_eq!(
            ok("ALTER GROUP $1 ON $2 SET (ordered = $3)").param_types(),
            vec![oid::TEXT, oid::TEXT, oid::BOOL]
        );
        assert_eq!(error("ALTER GROUP g ON q SET (lease_time = 5)").0, "22023");
        assert_eq!(error("ALTER GROUP g ON q SET (ordered = 7)").0, "22023");
        assert_eq!(
            error("ALTER GROUP g ON q SET (ordered = on, ordered = off)").0,
            "42601"
        );
        assert_eq!(error("ALTER GROUP g ON q SUBSCRIBE FROM later").0, "42601");
        assert_eq!(
            error("ALTER GROUP g ON q SUBSCRIBE FROM NOW LIMIT 1").0,
            "42601"
        );
    }

    #[test]
    fn postgresqls_alter_group_on_roles_passes_through() {
        for sql in [
            "ALTER GROUP staff ADD USER alice",
            "ALTER GROUP staff ADD USER alice, bob;",
            "ALTER GROUP staff DROP USER alice",
            "ALTER GROUP staff RENAME TO crew",
            "ALTER GROUP CURRENT_USER ADD USER alice",
            "alter group \"On\" add user alice",
            "ALTER GROUP",
            "ALTER GROUP staff",
        ] {
            assert_eq!(parse(sql), None, "{sql}");
        }
    }

    #[test]
    fn show_group_or_lagging_alone_is_postgresql() {
        assert_eq!(parse("SHOW lagging"), None);
        assert_eq!(parse("SHOW lagging;"), None);
    }
}
