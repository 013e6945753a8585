//! The cost of one PUSH's metrics: the per-queue counter's lookup and bump,
//! the statement histogram and the two clock reads, in this process.

use queenwire::metrics::queues::{QueueCounters, QueueTable};
use queenwire::metrics::{Kind, Metrics};
use uuid::Uuid;

pub fn counter_bump_per_push(quick: bool) {
    let t = QueueTable::new(1000);
    let m = Metrics::new(1000, true);
    let tenant = Uuid::from_u128(1);
    let names: Vec<String> = (0..1000).map(|i| format!("orders-{i}")).collect();
    for n in &names {
        t.get(tenant, n);
    }
    let rounds: usize = if quick { 200_000 } else { 2_000_000 };
    let start = std::time::Instant::now();
    for i in 0..rounds {
        let began = std::time::Instant::now();
        let c = t.get(tenant, &names[i % names.len()]);
        QueueCounters::add(&c.pushed, 1);
        m.statement(Kind::Push, began.elapsed(), true);
    }
    let per = start.elapsed() / rounds as u32;
    println!("per PUSH (lookup + counter + histogram + 2 clock reads): {per:?}");
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(std::time::Instant::now().elapsed());
    }
    let clocks = start.elapsed() / rounds as u32;
    println!("of which the two clock reads: {clocks:?}");
    let start = std::time::Instant::now();
    for i in 0..rounds {
        QueueCounters::add(&t.get(tenant, &names[i % names.len()]).pushed, 1);
    }
    let lookup = start.elapsed() / rounds as u32;
    println!("of which the per-queue lookup and bump: {lookup:?}");
}
