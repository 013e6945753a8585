//! Arbitrary UTF-8 through the dialect parser, the script classifier and
//! the passthrough classifiers:
//! no panic, no hang, and the few invariants the frontend relies on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use queenwire::engine::DEFAULT_TENANT;
use queenwire::rewrite::bind::Params;
use queenwire::calls::admin::ConfigureMode;
use queenwire::rewrite::build::{admin, kv, pop, timers};
use queenwire::rewrite::dialect::Statement;
use queenwire::rewrite::{self, dialect, Command};

fn calls_of(stmt: &Statement, params: &Params<'_>) {
    let tenant = DEFAULT_TENANT;
    match stmt {
        Statement::Kv(statement) => {
            if let Ok(call) = kv::apply(statement, params, 1 << 20, tenant) {
                assert!(dialect::validate_json(&call.ops).is_ok(), "{}", call.ops);
            }
        }
        Statement::CreateQueue(c) => {
            let mode = ConfigureMode::Create;
            if let Ok(call) = admin::configure(&c.queue, &c.settings, mode, params, tenant) {
                assert!(dialect::validate_json(&call.options).is_ok(), "{}", call.options);
            }
        }
        Statement::AlterQueue(a) => {
            let mode = ConfigureMode::Alter;
            if let Ok(call) = admin::configure(&a.queue, &a.settings, mode, params, tenant) {
                assert!(dialect::validate_json(&call.options).is_ok(), "{}", call.options);
            }
        }
        Statement::Pop(pop) => {
            let _ = pop::pop_args(pop, params);
        }
        Statement::SeekGroup(seek) => {
            let _ = admin::seek(seek, params, tenant);
        }
        Statement::DropGroup(drop) => {
            let _ = admin::drop_group(drop, params, tenant);
        }
        Statement::Schedule(schedule) => {
            let _ = timers::schedule(schedule, params, 1 << 20, tenant);
        }
        Statement::CancelSchedule(cancel) => {
            let _ = timers::cancel(cancel, params, tenant);
        }
        _ => {}
    }
}

fuzz_target!(|sql: &str| {
    let chars = sql.chars().count();

    if let Some(result) = dialect::parse(sql) {
        match result {
            Ok(stmt) => {
                // What Describe and CommandComplete ask of a statement.
                let types = stmt.param_types();
                assert_eq!(stmt.param_count(), types.len());
                assert!(types.len() <= 65_535, "more than 65535 parameters");
                let _ = stmt.param_type(0);
                let _ = stmt.param_type(types.len() + 1);
                let _ = stmt.columns();
                let _ = stmt.command_tag(usize::MAX);
                // The calls it becomes, with the input bound to every $n: no
                // panic, and the JSON a procedure takes is always valid.
                let bound = vec![Some(sql.to_string()); types.len()];
                calls_of(&stmt, &Params(&bound));
            }
            Err(e) => {
                // PostgreSQL's P field: 1-based, at most one past the end.
                if let Some(p) = e.position {
                    assert!(p >= 1 && p <= chars + 1, "position {p} in {chars} chars");
                }
                let _ = queenwire::engine::values::parse_error(e);
            }
        }
    }

    // A simple-query message: the session slices `sql` by these ranges.
    let mut last_end = 0;
    for (range, command) in rewrite::classify_script(sql) {
        assert!(range.start >= last_end && range.start <= range.end && range.end <= sql.len());
        assert!(sql.is_char_boundary(range.start) && sql.is_char_boundary(range.end));
        last_end = range.end;
        if let Command::Invalid(e) = command {
            if let Some(p) = e.position {
                assert!(
                    p >= 1 && p <= chars + 1,
                    "script position {p} in {chars} chars"
                );
            }
        }
    }

    // What the session learns of a statement it relays: each a pass over
    // client text.
    {
        use queenwire::rewrite::passthrough as p;
        let _ = p::deallocated_name(sql);
        let _ = p::resets(sql);
        let _ = p::sets_setting(sql);
        let _ = p::listening(sql);
        let _ = p::plain_begin(sql);
        let _ = p::transaction_control(sql);
        let _ = p::session_effect(sql);
    }

    // The validators the engine applies to bound parameters take the same
    // text a client can send.
    let _ = dialect::validate_json(sql);
    let _ = dialect::parse_duration(sql);
    let _ = dialect::validate_name("queue", sql);
    let _ = dialect::validate_namespace(sql);
    let _ = dialect::validate_kv_key(sql);
    let _ = dialect::validate_kv_bound("prefix", sql);
    let _ = dialect::parse_integer(sql);
    let _ = dialect::parse_count("LIMIT", sql);
    let _ = dialect::parse_bool(sql);
    // ACK/RENEW receipts are client text too (a forgery cannot pass the MAC).
    let _ = queenwire::engine::receipt::ReceiptKey::new(vec![7; 32]).decode(sql);
});
